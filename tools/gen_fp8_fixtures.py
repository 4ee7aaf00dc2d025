#!/usr/bin/env python3
"""Write FP8 checkpoints of the llama-mha-f32 fixture (tests/fixtures/models/) as transformers
stores them, for tests/runtime/test_quantized_models.c.

    python3 tools/gen_fp8_fixtures.py

Needs numpy and ml_dtypes (float8_e4m3fn), in a venv outside the repository:
python3 -m venv /tmp/fp8env && /tmp/fp8env/bin/pip install numpy ml_dtypes.

  tests/fixtures/models/llama-fp8-block   quantization_config {quant_method: fp8, fmt: e4m3,
      activation_scheme: dynamic, weight_block_size: [48, 48]} (FineGrainedFP8, DeepSeek-V3's
      layout with 48 instead of 128 so that these 64- and 128-wide matrices have several
      blocks and partial edge blocks): each linear's weight in F8_E4M3 and weight_scale_inv
      f32 [ceil(out / 48), ceil(in / 48)], scale = absmax(block) / 448, weight = e4m3(w / scale);
      dequantized.safetensors holds weight * weight_scale_inv in f32 (what the FP8 run must
      compute, bit for bit, on the exact path)
  tests/fixtures/models/llama-fp8-channel quantization_config {quant_method: fbgemm_fp8}: per
      output row, weight_scale f32 [out, 1]
The embeddings, norms and lm_head stay f32 (transformers leaves lm_head unconverted). Both
directories link reference.json and logits_*.npy semantics to the source fixture: the test
reads the source's prompts and transformers' f32 logits from ../llama-mha-f32.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np

import safetensors_io

try:
    import ml_dtypes
except ImportError:  # pragma: no cover
    sys.exit("gen_fp8_fixtures.py needs ml_dtypes: pip install numpy ml_dtypes (in a venv)")

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "tests" / "fixtures" / "models"
SRC = MODELS / "llama-mha-f32"
FP8_MAX = 448.0


def quantize(w: np.ndarray, br: int, bc: int) -> tuple[np.ndarray, np.ndarray]:
    out, inp = w.shape
    nr, nc = -(-out // br), -(-inp // bc)
    scale = np.zeros((nr, nc), np.float32)
    q = np.zeros(w.shape, ml_dtypes.float8_e4m3fn)
    for i in range(nr):
        for j in range(nc):
            blk = w[i * br:(i + 1) * br, j * bc:(j + 1) * bc]
            s = np.float32(np.abs(blk).max()) / np.float32(FP8_MAX)
            scale[i, j] = s
            if s > 0:
                q[i * br:(i + 1) * br, j * bc:(j + 1) * bc] = (blk / s).astype(
                    ml_dtypes.float8_e4m3fn)
    return q, scale


def dequantize(q: np.ndarray, scale: np.ndarray, br: int, bc: int) -> np.ndarray:
    full = np.repeat(np.repeat(scale, br, 0), bc, 1)[:q.shape[0], :q.shape[1]]
    return (q.astype(np.float32) * full).astype(np.float32)


def write(name: str, qcfg: dict, br: int | None, bc: int | None, scale_name: str,
          with_dequantized: bool) -> None:
    d = MODELS / name
    d.mkdir(exist_ok=True)
    cfg = json.loads((SRC / "config.json").read_text())
    cfg["quantization_config"] = qcfg
    (d / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    shutil.copy(SRC / "generation_config.json", d / "generation_config.json")
    tensors, deq = {}, {}
    for tname, a in safetensors_io.read(SRC / "model.safetensors").items():
        if a.ndim == 2 and ".layers." in tname and tname.endswith("_proj.weight"):
            rb = br or 1
            cb = bc or a.shape[1]
            q, s = quantize(a, rb, cb)
            tensors[tname] = ("F8_E4M3", q.view(np.uint8))
            tensors[tname[:-len("weight")] + scale_name] = ("F32", s)
            deq[tname] = ("F32", dequantize(q, s, rb, cb))
        else:
            tensors[tname] = ("F32", a)
            deq[tname] = ("F32", a)
    safetensors_io.write(d / "model.safetensors", tensors)
    if with_dequantized:
        safetensors_io.write(d / "dequantized.safetensors", deq)


def main() -> int:
    write("llama-fp8-block", {"quant_method": "fp8", "fmt": "e4m3",
                              "activation_scheme": "dynamic", "weight_block_size": [48, 48]},
          48, 48, "weight_scale_inv", True)
    write("llama-fp8-channel", {"quant_method": "fbgemm_fp8"}, None, None, "weight_scale", False)
    return 0


if __name__ == "__main__":
    sys.exit(main())

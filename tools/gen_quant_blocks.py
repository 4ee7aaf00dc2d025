#!/usr/bin/env python3
"""Test vectors for lh_k_dequantize: random raw ggml blocks and gguf-py's dequantization.

For each type this writes, under tests/fixtures/quant/ (or the directory given):
  <TYPE>.bin  the raw blocks (rows x cols elements, row-major, blocks back to back)
  <TYPE>.f32  gguf.quants.dequantize of those bytes, little-endian float32

The blocks are not quantized from data: their bytes are drawn at random (fixed seeds) and then
forced into the extreme cases, so every bit pattern a file may hold is reachable -- gguf-py can
quantize only a few of these types but dequantizes all of them. Each block type gets:
  - one block per special value of its f16 scale fields (d, and m / dmin where the type has one),
    all fields set to it: 65504 (max), -65504, 2^-14 (smallest normal), 2^-24 (smallest
    subnormal), 0x03ff (largest subnormal), -2^-24, 0, -0, -1;
  - mixed fields (d max with m -max, d smallest subnormal with m max) where there are two;
  - quant bytes all 0x00 and all 0xFF (with an ordinary scale), and for the K types the packed
    6-bit scales all 0x00 / all 0xFF (q4_k, q5_k) or the int8 scales -128 / 127 (q6_k);
  - random blocks to fill the rest, scales drawn from every finite f16 (any sign, exponent).
No scale is infinite or NaN: those give NaN whose payload IEEE leaves open (and CUDA
canonicalizes), so a bit-exact comparison would test the hardware, not the format.
f32 / f16 / bf16 get zeros, extremes, subnormals and infinities among random finite values.

Usage: tools/gen_quant_blocks.py [OUTDIR]   (needs numpy and gguf: pip install gguf numpy)
"""
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES

F16_SPECIAL = [0x7BFF, 0xFBFF, 0x0400, 0x0001, 0x03FF, 0x8001, 0x0000, 0x8000, 0xBC00]
F16_ONE = 0x3C00

# type: (seed, rows, blocks per row, f16 scale offsets, quant byte range, packed scale range)
TYPES = {
    "Q4_0": (1040, 5, 8, [0], (2, 18), None),
    "Q4_1": (1041, 5, 8, [0, 2], (4, 20), None),
    "Q5_0": (1050, 5, 8, [0], (2, 22), None),
    "Q5_1": (1051, 5, 8, [0, 2], (4, 24), None),
    "Q8_0": (1080, 5, 8, [0], (2, 34), None),
    "Q4_K": (1140, 4, 4, [0, 2], (16, 144), (4, 16)),
    "Q5_K": (1150, 4, 4, [0, 2], (16, 176), (4, 16)),
    "Q6_K": (1160, 4, 4, [208], (0, 192), (192, 208)),
}
ELEM_TYPES = {"F32": (1320, np.float32, np.uint32), "F16": (1161, np.float16, np.uint16),
              "BF16": (1316, None, np.uint16)}


def random_finite_f16(rng, n):
    out = rng.integers(0, 1 << 16, size=n, dtype=np.uint32)
    bad = (out & 0x7C00) == 0x7C00
    while bad.any():
        out[bad] = rng.integers(0, 1 << 16, size=int(bad.sum()), dtype=np.uint32)
        bad = (out & 0x7C00) == 0x7C00
    return out.astype(np.uint16)


def put_f16(block, off, v):
    block[off] = v & 0xFF
    block[off + 1] = v >> 8


def block_type(name, seed, rows, bpr, f16_offs, qrange, srange):
    qt = T[name]
    be, bb = GGML_QUANT_SIZES[qt]
    n = rows * bpr
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, size=(n, bb), dtype=np.uint8)
    for i in range(n):  # every scale finite to start with
        for off, v in zip(f16_offs, random_finite_f16(rng, len(f16_offs))):
            put_f16(blocks[i], off, int(v))
    k = 0
    for v in F16_SPECIAL:
        for off in f16_offs:
            put_f16(blocks[k], off, v)
        k += 1
    if len(f16_offs) == 2:
        put_f16(blocks[k], f16_offs[0], 0x7BFF)
        put_f16(blocks[k], f16_offs[1], 0xFBFF)
        k += 1
        put_f16(blocks[k], f16_offs[0], 0x0001)
        put_f16(blocks[k], f16_offs[1], 0x7BFF)
        k += 1
    for fill in (0x00, 0xFF):
        blocks[k, qrange[0]:qrange[1]] = fill
        for off in f16_offs:
            put_f16(blocks[k], off, F16_ONE)
        k += 1
    if srange is not None:
        fills = (0x80, 0x7F) if name == "Q6_K" else (0x00, 0xFF)
        for fill in fills:
            blocks[k, srange[0]:srange[1]] = fill
            k += 1
        blocks[k, srange[0]:srange[1]] = 0xFF  # largest scales with all-0xFF quants
        blocks[k, qrange[0]:qrange[1]] = 0xFF
        for off in f16_offs:
            put_f16(blocks[k], off, 0x7BFF)
        k += 1
    assert k <= n, (name, k, n)
    raw = blocks.reshape(rows, bpr * bb)
    deq = quants.dequantize(raw, qt)
    assert deq.dtype == np.float32 and deq.shape == (rows, bpr * be), (name, deq.shape)
    return raw, deq


def elem_type(name, seed):
    rows, cols = 4, 64
    rng = np.random.default_rng(seed)
    if name == "F32":
        bits = rng.integers(0, 1 << 32, size=rows * cols, dtype=np.uint64).astype(np.uint32)
        nan = (bits & 0x7F800000) == 0x7F800000
        bits[nan] &= 0xFF800000  # NaN -> infinity of the same sign
        special = [0x00000000, 0x80000000, 0x7F7FFFFF, 0xFF7FFFFF, 0x00800000, 0x00000001,
                   0x007FFFFF, 0x80000001, 0x7F800000, 0xFF800000, 0x3F800000]
    else:
        bits = rng.integers(0, 1 << 16, size=rows * cols, dtype=np.uint32).astype(np.uint16)
        if name == "F16":
            nan = ((bits & 0x7C00) == 0x7C00) & ((bits & 0x03FF) != 0)
            bits[nan] &= 0xFC00
            special = [0x0000, 0x8000, 0x7BFF, 0xFBFF, 0x0400, 0x0001, 0x03FF, 0x8001, 0x7C00,
                       0xFC00, 0x3C00]
        else:
            nan = ((bits & 0x7F80) == 0x7F80) & ((bits & 0x007F) != 0)
            bits[nan] &= 0xFF80
            special = [0x0000, 0x8000, 0x7F7F, 0xFF7F, 0x0080, 0x0001, 0x007F, 0x8001, 0x7F80,
                       0xFF80, 0x3F80]
    bits[:len(special)] = special
    raw = bits.view(np.uint8).reshape(rows, -1)
    deq = quants.dequantize(raw, T[name]).reshape(rows, cols)
    assert deq.dtype == np.float32
    return raw, deq


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "tests", "fixtures", "quant")
    os.makedirs(out, exist_ok=True)
    for name in list(ELEM_TYPES) + list(TYPES):
        if name in TYPES:
            raw, deq = block_type(name, *TYPES[name])
        else:
            raw, deq = elem_type(name, ELEM_TYPES[name][0])
        with open(os.path.join(out, name + ".bin"), "wb") as f:
            f.write(np.ascontiguousarray(raw).tobytes())
        with open(os.path.join(out, name + ".f32"), "wb") as f:
            f.write(np.ascontiguousarray(deq).astype("<f4").tobytes())
        print(f"{name}: {deq.shape[0]} x {deq.shape[1]}, {raw.nbytes} bytes -> {deq.nbytes} bytes")


if __name__ == "__main__":
    main()

"""The safetensors container read and written with numpy alone (the fixture generators that
need neither torch nor the safetensors package: gen_gguf_fixtures.py, gen_fp8_fixtures.py,
bench/gguf_accuracy.py). Format: an 8-byte little-endian header length, a JSON header
{name: {dtype, shape, data_offsets}}, the data."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np


def read(path: Path) -> dict[str, np.ndarray]:
    """F32 and BF16 tensors as float32 arrays (BF16 widened exactly); other dtypes refused."""
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        buf = data[b:e]
        if info["dtype"] == "F32":
            a = np.frombuffer(buf, dtype="<f4").astype(np.float32)
        elif info["dtype"] == "BF16":
            a = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(f"{path}: tensor {name} is {info['dtype']} (F32 or BF16 expected)")
        out[name] = a.reshape(info["shape"])
    return out


def write(path: Path, tensors: dict[str, tuple[str, np.ndarray]]) -> None:
    """tensors: name -> (safetensors dtype string, array whose bytes are stored)."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        dt, a = tensors[name]
        b = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    Path(path).write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))

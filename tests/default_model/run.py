#!/usr/bin/env python3
"""Runs test_convert_gguf.py (or the module named by argv[1]) for `meson test` and prints `LH-TEST-SUMMARY passed= failed=
skipped=` (tools/test_summary.py adds it up).

The converter needs numpy and safetensors (tools/default_model/requirements.txt). `make test`
installs them into a virtual environment and runs this file with its Python, setting
LH_REQUIRE_PYDEPS=1: then a missing module is a failure. Run by hand without them, the tests
are reported as skipped, visibly, with the reason."""
import importlib.util
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    # make test names the virtual environment's Python; meson starts this file with python3
    py = os.environ.get("LH_PYENV_PYTHON")
    if py and not os.environ.get("LH_PYENV_REEXEC") and \
            os.path.abspath(py) != os.path.abspath(sys.executable):
        if not os.access(py, os.X_OK):
            print(f"test_convert_gguf: LH_PYENV_PYTHON={py} is not executable", file=sys.stderr)
            print("LH-TEST-SUMMARY passed=0 failed=1 skipped=0")
            return 1
        os.environ["LH_PYENV_REEXEC"] = "1"
        os.execv(py, [py] + sys.argv)
    missing = [m for m in ("numpy", "safetensors") if importlib.util.find_spec(m) is None]
    if missing:
        why = f"{sys.executable} lacks {', '.join(missing)} (pip install -r " \
              "tools/default_model/requirements.txt)"
        if os.environ.get("LH_REQUIRE_PYDEPS") == "1":
            print(f"test_convert_gguf: {why}", file=sys.stderr)
            print("LH-TEST-SUMMARY passed=0 failed=1 skipped=0")
            return 1
        print(f"test_convert_gguf: skipped: {why}")
        print("LH-TEST-SUMMARY passed=0 failed=0 skipped=1")
        return 0
    sys.path.insert(0, HERE)
    name = sys.argv[1] if len(sys.argv) > 1 else "test_convert_gguf"
    module = importlib.import_module(name)
    suite = unittest.defaultTestLoader.loadTestsFromModule(module)
    r = unittest.TextTestRunner(verbosity=2).run(suite)
    failed = len({t.id() for t, _ in r.failures + r.errors})
    skipped = len(r.skipped)
    passed = r.testsRun - failed - skipped
    sys.stdout.flush()
    print(f"LH-TEST-SUMMARY passed={passed} failed={failed} skipped={skipped}")
    return 0 if failed == 0 and r.testsRun > 0 else 1


if __name__ == "__main__":
    sys.exit(main())

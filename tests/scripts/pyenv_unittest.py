#!/usr/bin/env python3
"""Runs a unittest module that needs PyPI packages, for `meson test`, and prints
`LH-TEST-SUMMARY passed= failed= skipped=` (tools/test_summary.py adds it up).

usage: pyenv_unittest.py DIR MODULE REQUIREMENTS PACKAGE[,PACKAGE...]

`make test` installs the packages into a virtual environment and names its Python in
LH_PYENV_PYTHON, setting LH_REQUIRE_PYDEPS=1: then a missing package is a failure. Run by hand
without them, the module is reported as skipped, visibly, with the reason."""
import importlib.util
import os
import sys
import unittest


def main():
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    here, name, requirements, packages = sys.argv[1:]
    # make test names the virtual environment's Python; meson starts this file with python3
    py = os.environ.get("LH_PYENV_PYTHON")
    if py and not os.environ.get("LH_PYENV_REEXEC") and \
            os.path.abspath(py) != os.path.abspath(sys.executable):
        if not os.access(py, os.X_OK):
            print(f"{name}: LH_PYENV_PYTHON={py} is not executable", file=sys.stderr)
            print("LH-TEST-SUMMARY passed=0 failed=1 skipped=0")
            return 1
        os.environ["LH_PYENV_REEXEC"] = "1"
        os.execv(py, [py] + sys.argv)
    missing = [m for m in packages.split(",") if importlib.util.find_spec(m) is None]
    if missing:
        why = f"{sys.executable} lacks {', '.join(missing)} (pip install -r {requirements})"
        if os.environ.get("LH_REQUIRE_PYDEPS") == "1":
            print(f"{name}: {why}", file=sys.stderr)
            print("LH-TEST-SUMMARY passed=0 failed=1 skipped=0")
            return 1
        print(f"{name}: skipped: {why}")
        print("LH-TEST-SUMMARY passed=0 failed=0 skipped=1")
        return 0
    sys.path.insert(0, here)
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

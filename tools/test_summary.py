#!/usr/bin/env python3
"""Adds up the results of every `meson test` run given into one closing line
`N passed, N failed, N skipped`. Each argument is a build dir (its meson-logs/testlog.json,
the log of a plain `meson test`) or the path of one JSON test log (a `meson test --setup NAME`
run writes meson-logs/testlog-NAME.json, so two runs in one build dir are both counted).

CUnit programs print `LH-TEST-SUMMARY passed=P failed=F skipped=S` (tests/support/runner.c):
their individual tests count. Any other test (a script) counts as one. A CUnit program that
died before printing its summary counts as one failure, so a crash can never shrink the total.
Exits 1 when anything failed or nothing ran."""
import json
import re
import sys

SUMMARY = re.compile(r"^LH-TEST-SUMMARY passed=(\d+) failed=(\d+) skipped=(\d+)$", re.M)


def main(build_dirs):
    passed = failed = skipped = 0
    for build in build_dirs:
        path = build if build.endswith(".json") else f"{build}/meson-logs/testlog.json"
        try:
            with open(path, encoding="utf-8") as f:
                records = [json.loads(line) for line in f if line.strip()]
        except OSError as e:
            print(f"test_summary: cannot read {path}: {e}", file=sys.stderr)
            failed += 1
            continue
        for rec in records:
            out = rec.get("stdout") or ""
            m = SUMMARY.search(out)
            result = rec.get("result")
            if m:
                p, f_, s = (int(x) for x in m.groups())
                passed += p
                failed += f_
                skipped += s
                if result != "OK" and f_ == 0:
                    failed += 1  # the program failed (e.g. crashed in cleanup, leak report)
                    print(f"test_summary: {build}: {rec.get('name')}: {result} after its "
                          f"tests passed", file=sys.stderr)
            elif result == "OK":
                passed += 1
            elif result == "SKIP":
                skipped += 1
            else:
                failed += 1
                print(f"test_summary: {build}: {rec.get('name')}: {result}", file=sys.stderr)
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: test_summary.py BUILD_DIR|TESTLOG.json...")
    sys.exit(main(sys.argv[1:]))

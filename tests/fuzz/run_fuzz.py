#!/usr/bin/env python3
"""Runs one libFuzzer harness for `meson test` (suite fuzz) and prints
`LH-TEST-SUMMARY passed= failed= skipped=` (tools/test_summary.py adds it up).

usage: run_fuzz.py HARNESS NAME SEED_DIR DICT REGRESSION_DIR

1. Every committed reproducer in REGRESSION_DIR runs once: a crash, a sanitizer report or a
   leak there is a failure (a bug that came back).
2. The harness fuzzes for LH_FUZZ_SECONDS (default 30) from SEED_DIR with DICT, new inputs
   going to a scratch corpus (the committed one is never written). Any crash, leak, sanitizer
   report, timeout (10 s per input) or out-of-memory (2 GiB) fails the test, and the
   reproducer is printed (path, size and the first bytes in hex) so that it can be committed
   to REGRESSION_DIR once fixed.
One line `fuzz NAME: ...` reports executions, executions per second, edges covered and the
corpus size. Bounded: the run is killed after LH_FUZZ_SECONDS + 120 s."""
import os
import re
import shutil
import subprocess
import sys
import tempfile


def hexdump(path, limit=256):
    with open(path, "rb") as f:
        data = f.read(limit)
    return " ".join("%02x" % b for b in data)


def main():
    if len(sys.argv) != 6:
        print(__doc__, file=sys.stderr)
        return 2
    exe, name, seeds, dictionary, regressions = sys.argv[1:]
    seconds = int(os.environ.get("LH_FUZZ_SECONDS", "30"))
    failed = 0
    # libFuzzer reports leaks through LeakSanitizer; UBSan must stop at its first report so
    # that libFuzzer sees it as a crash
    env = dict(os.environ)
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=1:symbolize=1")
    env["UBSAN_OPTIONS"] = "halt_on_error=1:abort_on_error=1:print_stacktrace=1"
    repro = sorted(os.path.join(regressions, f) for f in os.listdir(regressions)) \
        if os.path.isdir(regressions) else []
    repro = [f for f in repro if os.path.isfile(f) and not f.endswith(".md")]
    if repro:
        r = subprocess.run([exe, "-timeout=10", "-rss_limit_mb=2048"] + repro, env=env,
                           capture_output=True, text=True, errors="replace",
                           timeout=120 + 10 * len(repro))
        if r.returncode != 0:
            print(r.stderr[-6000:], file=sys.stderr)
            print(f"fuzz {name}: a committed reproducer fails again ({regressions})")
            failed += 1
        else:
            print(f"fuzz {name}: {len(repro)} reproducers of fixed bugs pass")
    work = tempfile.mkdtemp(prefix=f"lh-fuzz-{name}-")
    try:
        corpus = os.path.join(work, "corpus")
        artifacts = os.path.join(work, "artifacts") + "/"
        os.makedirs(corpus)
        os.makedirs(artifacts)
        cmd = [exe, f"-max_total_time={seconds}", "-timeout=10", "-rss_limit_mb=2048",
               "-malloc_limit_mb=2048", "-max_len=65536", "-print_final_stats=1",
               f"-artifact_prefix={artifacts}"]
        if os.path.isfile(dictionary):
            cmd.append(f"-dict={dictionary}")
        cmd += [corpus, seeds]
        try:
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, errors="replace",
                               timeout=seconds + 120)
            out, code = r.stderr, r.returncode
        except subprocess.TimeoutExpired as e:
            out = (e.stderr or b"").decode("utf-8", "replace") if isinstance(e.stderr, bytes) \
                else (e.stderr or "")
            code = -1
            print(f"fuzz {name}: the run did not end within {seconds + 120} s", file=sys.stderr)
        execs = re.findall(r"stat::number_of_executed_units:\s*(\d+)", out)
        speed = re.findall(r"stat::average_exec_per_sec:\s*(\d+)", out)
        cov = re.findall(r"\bcov: (\d+)", out)
        corp = re.findall(r"\bcorp: (\d+)", out)
        seeds_n = len(os.listdir(seeds)) if os.path.isdir(seeds) else 0
        print(f"fuzz {name}: {execs[-1] if execs else '?'} executions in {seconds} s "
              f"({speed[-1] if speed else '?'}/s), {cov[-1] if cov else '?'} edges covered, "
              f"corpus {corp[-1] if corp else '?'} inputs from {seeds_n} seeds")
        if code != 0:
            failed += 1
            print(out[-8000:], file=sys.stderr)
            for f in sorted(os.listdir(artifacts)):
                p = os.path.join(artifacts, f)
                print(f"fuzz {name}: reproducer {f} ({os.path.getsize(p)} bytes): "
                      f"{hexdump(p)}", file=sys.stderr)
                keep = os.environ.get("LH_FUZZ_KEEP")
                if keep:
                    os.makedirs(keep, exist_ok=True)
                    shutil.copy(p, os.path.join(keep, f"{name}-{f}"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"LH-TEST-SUMMARY passed={0 if failed else 1} failed={1 if failed else 0} skipped=0")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

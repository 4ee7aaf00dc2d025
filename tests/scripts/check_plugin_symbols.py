#!/usr/bin/env python3
"""Symbol hygiene of plugins (DESIGN §4).

For every plugin (*.so directly in --builtin-dir and --test-dir):
  * none of its undefined dynamic symbols may be one that libllmhost defines: plugins reach
    the host only through the API table passed to init, never by linking against it;
  * a built-in plugin's only global dynamic function (nm type T) is lh_plugin_entry
    (everything else is hidden);
  * a test plugin exports lh_plugin_entry as its only function too, except tp_noentry, which
    deliberately exports another function and no entry.

Each plugin checked is one test case. Prints `LH-TEST-SUMMARY passed=P failed=F skipped=S`.

usage: check_plugin_symbols.py --nm NM --host-lib LIBLLMHOST --builtin-dir DIR --test-dir DIR
"""
import argparse
import glob
import os
import subprocess
import sys

ENTRY = "lh_plugin_entry"
# The deliberately broken test plugins and what is special about them.
NO_ENTRY = {"libmodel_tp_noentry.so"}  # exports not_an_llmhost_entry, no lh_plugin_entry
# tp_undef / tp_missingdep import symbols no library (or a library not on the path) defines;
# those are not libllmhost's, so the undefined-symbol check applies to them unchanged.
# tp_badmagic has a normal symbol table (its descriptor is what is wrong).


def nm(nm_prog, path, *flags):
    """[(type, name)] of the dynamic symbol table; name without @VERSION."""
    p = subprocess.run([nm_prog, "-D", *flags, path], capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise RuntimeError("%s -D %s %s failed: %s" % (nm_prog, " ".join(flags), path,
                                                       p.stderr.strip()))
    syms = []
    for line in p.stdout.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        typ, name = parts[-2], parts[-1]
        syms.append((typ, name.split("@")[0]))
    return syms


def check_plugin(args, path, host_defined, builtin):
    """Returns a list of problems (empty when the plugin passes)."""
    problems = []
    base = os.path.basename(path)
    undefined = {name for _, name in nm(args.nm, path, "--undefined-only")}
    clash = sorted(undefined & host_defined)
    if clash:
        problems.append("imports symbols that libllmhost defines (plugins must use the host API "
                        "table): " + ", ".join(clash))
    functions = sorted(name for typ, name in nm(args.nm, path, "--defined-only") if typ == "T")
    if builtin or base not in NO_ENTRY:
        if functions != [ENTRY]:
            problems.append("exported functions are %s; expected exactly [%s] (build with "
                            "-fvisibility=hidden)" % (functions or "none", ENTRY))
    elif ENTRY in functions:
        problems.append("is meant to have no %s but exports it" % ENTRY)
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nm", default="nm")
    ap.add_argument("--host-lib", required=True)
    ap.add_argument("--builtin-dir", required=True)
    ap.add_argument("--test-dir", required=True)
    args = ap.parse_args()

    passed = failed = 0
    try:
        host_defined = {name for typ, name in nm(args.nm, args.host_lib, "--defined-only")
                        if typ not in ("U", "w", "v")}
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:
        print("FAIL libllmhost: %s" % e)
        print("LH-TEST-SUMMARY passed=0 failed=1 skipped=0")
        return 1
    if not host_defined:
        print("FAIL %s: defines no dynamic symbol?" % args.host_lib)
        failed += 1

    builtin = sorted(glob.glob(os.path.join(args.builtin_dir, "lib*.so")))
    tests = sorted(glob.glob(os.path.join(args.test_dir, "lib*.so")))
    if not builtin:
        print("FAIL %s: no built-in plugin found" % args.builtin_dir)
        failed += 1
    if not tests:
        print("FAIL %s: no test plugin found" % args.test_dir)
        failed += 1

    for path, is_builtin in [(p, True) for p in builtin] + [(p, False) for p in tests]:
        try:
            problems = check_plugin(args, path, host_defined, is_builtin)
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:
            problems = [str(e)]
        label = "%s plugin %s" % ("built-in" if is_builtin else "test", path)
        if problems:
            failed += 1
            for pr in problems:
                print("FAIL %s: %s" % (label, pr))
        else:
            passed += 1
            print("ok   %s" % label)
    print("LH-TEST-SUMMARY passed=%d failed=%d skipped=0" % (passed, failed))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())

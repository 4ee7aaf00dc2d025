#!/usr/bin/env python3
"""The installed llmhost finds its built-in plugins relative to libllmhost, with no LLMHOST_*
environment variable.

Runs `DESTDIR=<tmp> meson install -C BUILDDIR --no-rebuild --quiet`, takes prefix and libdir
from `meson introspect --buildoptions`, then runs <tmp>/<prefix>/<bindir>/llmhost with only
LD_LIBRARY_PATH=<tmp>/<prefix>/<libdir> set (the installed binary carries no build rpath).

Each check is one test case. Prints `LH-TEST-SUMMARY passed=P failed=F skipped=S`.

usage: check_install.py --meson MESON --builddir BUILDDIR --fixtures TESTS/FIXTURES
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lh_checker import Checker, under  # noqa: E402

LLAMA_8B_PARAMS = 8030261248


def is_inside(path, directory):
    path, directory = os.path.realpath(path), os.path.realpath(directory)
    return os.path.commonpath([path, directory]) == directory


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--meson", default="meson")
    ap.add_argument("--builddir", required=True)
    ap.add_argument("--fixtures", required=True)
    args = ap.parse_args()
    c = Checker()

    p = subprocess.run([args.meson, "introspect", "--buildoptions", args.builddir],
                       capture_output=True, text=True, timeout=120)
    if not c.check("meson introspect --buildoptions", p.returncode == 0, p.stderr.strip()):
        return c.summary()
    opts = {o["name"]: o["value"] for o in json.loads(p.stdout)}
    prefix, libdir, bindir = opts["prefix"], opts["libdir"], opts["bindir"]
    if not os.path.isabs(libdir):
        libdir = os.path.join(prefix, libdir)
    if not os.path.isabs(bindir):
        bindir = os.path.join(prefix, bindir)

    dest = tempfile.mkdtemp(prefix="lh-install-")
    os.chmod(dest, 0o755)
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LLMHOST_")}
        env["DESTDIR"] = dest
        p = subprocess.run([args.meson, "install", "-C", args.builddir, "--no-rebuild",
                            "--quiet"], capture_output=True, text=True, env=env, timeout=240)
        if not c.check("meson install --destdir", p.returncode == 0,
                       "exit %d\n%s%s" % (p.returncode, p.stdout, p.stderr)):
            return c.summary()

        lib = under(dest, libdir)
        plugins = os.path.join(lib, "llmhost", "plugins")
        exe = os.path.join(under(dest, bindir), "llmhost")
        c.check("installed llmhost", os.access(exe, os.X_OK), exe)
        c.check("installed libllmhost", bool(glob.glob(os.path.join(lib, "libllmhost.so*"))), lib)
        c.check("installed built-in arch_index.tsv",
                os.path.isfile(os.path.join(plugins, "arch_index.tsv")), plugins)
        for so in ("libmodel_llama.so", "libmodel_qwen.so"):
            f = os.path.join(plugins, so)
            ok = os.path.isfile(f) and not (os.stat(f).st_mode & 0o022)
            c.check("installed %s (not group/world-writable)" % so, ok, f)
        stray = [os.path.relpath(os.path.join(r, f), dest) for r, _, fs in os.walk(dest)
                 for f in fs if "_tp_" in f or f.startswith("libtp_") or f == "libmodel_bench.so"]
        c.check("no test plugin installed", not stray, ", ".join(stray))

        run_env = {k: v for k, v in os.environ.items()
                   if not k.startswith("LLMHOST_") and k != "LD_LIBRARY_PATH"}
        run_env["LD_LIBRARY_PATH"] = lib
        run_env["LLMHOST_LOG"] = "warn"

        def llmhost(*a):
            p = subprocess.run([exe, *a], capture_output=True, text=True, env=run_env,
                               cwd=dest, timeout=60, stdin=subprocess.DEVNULL)
            try:
                j = json.loads(p.stdout) if p.returncode == 0 else None
            except ValueError:
                j = None
            return p, j

        model = os.path.join(args.fixtures, "configs", "llama-3.1-8b")
        p, j = llmhost("explain", model, "--json")
        if c.check("installed llmhost explain llama-3.1-8b", j is not None,
                   "exit %d: %s" % (p.returncode, p.stderr.strip())):
            so = j.get("shared_object", "")
            c.check("explain: plugin found under <libdir>/llmhost/plugins",
                    is_inside(so, plugins) and so.endswith("/libmodel_llama.so"),
                    "shared_object %s, expected under %s" % (so, plugins))
            c.check("explain: origin builtin", j.get("origin") == "builtin", str(j.get("origin")))
            att = (j.get("attention") or {}).get("shared_object", "")
            c.check("explain: loaded only that plugin and its attention backend",
                    j.get("loaded_plugins") == [att, so] and is_inside(att, plugins),
                    str(j.get("loaded_plugins")))
            c.check("explain: parameters %d" % LLAMA_8B_PARAMS,
                    j.get("parameters") == LLAMA_8B_PARAMS, str(j.get("parameters")))

        p, j = llmhost("resolve", os.path.join(args.fixtures, "configs", "qwen3-8b"), "--json")
        if c.check("installed llmhost resolve qwen3-8b", j is not None,
                   "exit %d: %s" % (p.returncode, p.stderr.strip())):
            so = j.get("shared_object", "")
            c.check("resolve: libmodel_qwen.so under <libdir>/llmhost/plugins",
                    is_inside(so, plugins) and so.endswith("/libmodel_qwen.so"), so)

        p, j = llmhost("list", "--json")
        if c.check("installed llmhost list", j is not None,
                   "exit %d: %s" % (p.returncode, p.stderr.strip())):
            c.check("list: builtin_dir is <libdir>/llmhost/plugins",
                    os.path.realpath(j.get("builtin_dir", "")) == os.path.realpath(plugins),
                    "%s != %s" % (j.get("builtin_dir"), plugins))
            c.check("list: loads no plugin", j.get("loaded_plugins") == [],
                    str(j.get("loaded_plugins")))

        # The installed files must not point back into the build tree.
        readelf = shutil.which("readelf")
        if readelf:
            build = os.path.realpath(args.builddir)
            leaks = []
            for f in [exe] + glob.glob(os.path.join(lib, "*.so*")) + \
                    glob.glob(os.path.join(plugins, "*.so")):
                if os.path.islink(f):
                    continue
                out = subprocess.run([readelf, "-d", f], capture_output=True, text=True,
                                     timeout=60).stdout
                for line in out.splitlines():
                    if ("RPATH" in line or "RUNPATH" in line) and build in line:
                        leaks.append("%s: %s" % (f, line.strip()))
            c.check("no build-tree RPATH/RUNPATH in installed files", not leaks, "; ".join(leaks))
        else:
            c.skip("no build-tree RPATH/RUNPATH in installed files", "readelf not found")
    finally:
        shutil.rmtree(dest, ignore_errors=True)
    return c.summary()


if __name__ == "__main__":
    sys.exit(main())

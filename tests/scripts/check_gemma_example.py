#!/usr/bin/env python3
"""The out-of-tree architecture example (examples/gemma_plugin), built only through pkg-config.

Runs `DESTDIR=<tmp> meson install -C BUILDDIR --no-rebuild --quiet` (as check_embed_example.py:
the .pc files are relocatable; without pkgconfig.relocatable the staged copies get their
prefix= line rewritten), builds examples/gemma_plugin with `PKG_CONFIG_PATH=<prefix>/<libdir>/
pkgconfig meson setup` + `meson compile` (-Dwerror=true), copies libmodel_gemma.so,
libattn_sinks.so (mode 0755) and arch_index.tsv (0644) into a fresh custom module dir (0755),
then checks with the installed llmhost on tests/fixtures/models/external/gemma-f32 (a tiny
random GemmaForCausalLM written by tools/gen_fixtures.py with transformers; under external/
because the suites that run every fixture in models/ on the built-in plugins cannot serve it):
  - the plugins import their kernels: `nm -D` shows lh_k_* only as undefined symbols (no
    kernel code in a plugin), only lh_plugin_entry is exported, libattn_sinks.so needs
    libllmhost_kernels and neither needs libllmhost;
  - `llmhost plugin check DIR` exits 0 (both plugins load, the index matches them);
  - `llmhost resolve --json`: origin external, shared_object DIR/libmodel_gemma.so, and only
    that plugin loaded (the index is read lazily: the sinks backend is not loaded);
  - `llmhost run --json` greedy ids for every prompt of reference.json == its `greedy`;
  - `llmhost logits` for every prompt vs logits_<i>.npy: max abs difference <= 1e-4 (f32
    checkpoint, f32 compute; transformers' own f32-vs-f64 gap is ~3e-6 here, and the smallest
    top-2 margin of the greedy steps is ~3e-3, so 1e-4 cannot flip a token);
  - `--attn-backend sinks` (the example's StreamingLLM backend, 4 sinks + 1020 window): ids
    equal to the default backend's (the contexts, <= 43 tokens, fit in the ring) and logits
    within 1e-4; on mistral-swa-f32 (the built-in Llama plugin, sliding_window 8) the backend
    attends with the model's window in an 8-slot ring and must reproduce transformers' greedy
    ids although the prompt (20 tokens) and the generation overrun the ring;
  - a build with a tiny ring (-Dn_sinks=2 -Dwindow=6) generates 120 tokens (15x the ring)
    with the first tokens, whose context still fits, equal to the reference.
Nothing runs with LD_LIBRARY_PATH or an LLMHOST_* variable other than LLMHOST_DEVICE=cpu and
LLMHOST_LOG=warn.

Every check is skipped (counted, with the reason) when the installed SDK lacks the host API
the example needs (plugin ABI 3: the model contract of lh_model.h with LH_ACT_GELU_TANH, the
add_head / weight_tensor / residual_rmsnorm entries of the host API, lh_k_attention_positions).
Prints `LH-TEST-SUMMARY passed=P failed=F skipped=S`.

usage: check_gemma_example.py --meson MESON --builddir BUILDDIR --source-root SRC
       [--pkg-config PKG_CONFIG]
"""
import argparse
import ast
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lh_checker import Checker, clean_env, install_dirs, stage_install, under  # noqa: E402

MODEL = "external/gemma-f32"  # outside models/ proper: no built-in plugin serves it
SWA_MODEL = "mistral-swa-f32"
LOGITS_TOL = 1e-4
N_NEW = 32
# what the example needs from the installed SDK (plugin ABI 3: a model plugin owns its forward)
NEEDED_API = [("lh_model.h", "LH_ACT_GELU_TANH"), ("lh_plugin.h", "add_head"),
              ("lh_plugin.h", "weight_tensor"), ("lh_plugin.h", "residual_rmsnorm"),
              ("lh_kernels.h", "lh_k_attention_positions")]


def read_npy_f32(path):
    """Minimal .npy reader for '<f4' C-order arrays (no numpy needed)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:6] != b"\x93NUMPY":
        raise ValueError("%s: not a .npy file" % path)
    if data[6] == 1:
        (hlen,) = struct.unpack("<H", data[8:10])
        start = 10
    else:
        (hlen,) = struct.unpack("<I", data[8:12])
        start = 12
    header = ast.literal_eval(data[start:start + hlen].decode("latin1"))
    if header["descr"] != "<f4" or header["fortran_order"]:
        raise ValueError("%s: not a C-order float32 array: %s" % (path, header))
    count = 1
    for d in header["shape"]:
        count *= d
    return tuple(header["shape"]), struct.unpack("<%df" % count,
                                                data[start + hlen:start + hlen + 4 * count])


def nm_symbols(nm, path):
    """(defined, undefined) dynamic symbol names of a shared object."""
    p = subprocess.run([nm, "-D", path], capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise RuntimeError("nm -D %s: %s" % (path, p.stderr.strip()))
    defined, undefined = set(), set()
    for line in p.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in ("U", "w", "v"):
            undefined.add(parts[1].split("@")[0])
        elif len(parts) == 3:
            (undefined if parts[1] in ("U", "w", "v") else defined).add(parts[2].split("@")[0])
    return defined, undefined


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--meson", required=True)
    ap.add_argument("--builddir", required=True)
    ap.add_argument("--source-root", required=True)
    ap.add_argument("--pkg-config", default="pkg-config")
    args = ap.parse_args()
    c = Checker()
    src = os.path.abspath(args.source_root)
    fixtures = os.path.join(src, "tests", "fixtures", "models")

    dirs = install_dirs(c, args.meson, args.builddir)
    if not dirs:
        return c.summary()
    prefix, libdir, bindir = dirs["prefix"], dirs["libdir"], dirs["bindir"]
    includedir, relocatable = dirs["includedir"], dirs["relocatable"]

    dest = tempfile.mkdtemp(prefix="lh-gemma-")
    os.chmod(dest, 0o755)
    try:
        env = clean_env()
        root = stage_install(c, args.meson, args.builddir, dest)
        if not root:
            return c.summary()
        lib = under(root, libdir)
        inc = os.path.join(under(root, includedir), "llmhost")
        exe = os.path.join(under(root, bindir), "llmhost")
        pcdir = os.path.join(lib, "pkgconfig")

        # ---- the host API the example needs ---------------------------------------------------
        missing = []
        for header, word in NEEDED_API:
            try:
                text = open(os.path.join(inc, header), encoding="utf-8").read()
            except OSError:
                text = ""
            if not re.search(r"\b%s\b" % word, text):
                missing.append("%s in %s" % (word, header))
        if missing:
            for name in ("build the example", "nm -D: kernels imported", "plugin check",
                         "resolve", "run greedy", "logits", "sinks backend", "tiny ring"):
                c.skip(name, "the installed SDK lacks the host API of plugin ABI 3: " +
                       ", ".join(missing))
            return c.summary()

        if not relocatable:
            c.skip("the .pc files are relocatable", "pkgconfig.relocatable is off in this "
                   "build dir; rewriting prefix= in the staged copies")
            for f in ("llmhost.pc", "llmhost-plugin.pc"):
                path = os.path.join(pcdir, f)
                t = re.sub(r"^prefix=.*$", "prefix=" + under(root, prefix),
                           open(path).read(), count=1, flags=re.M)
                os.chmod(path, 0o644)
                open(path, "w").write(t)
        penv = dict(env, PKG_CONFIG_PATH=pcdir)
        if shutil.which(args.pkg_config) or os.path.isfile(args.pkg_config):
            penv["PKG_CONFIG"] = args.pkg_config  # the pkg-config meson's dependency() runs

        # ---- build examples/gemma_plugin against the staged install ---------------------------
        def build(name, extra):
            bdir = os.path.join(dest, name)
            setup = [args.meson, "setup", bdir, os.path.join(src, "examples", "gemma_plugin"),
                     "-Dwerror=true"] + extra
            sanitize = dirs["b_sanitize"]
            if sanitize not in (None, "none", "", []):
                setup.append("-Db_sanitize=" + (",".join(sanitize) if isinstance(sanitize, list)
                                                else sanitize))
            p = subprocess.run(setup, capture_output=True, text=True, env=penv, timeout=300)
            label = "examples/gemma_plugin" + "".join(" " + e for e in extra)
            if not c.check("%s: PKG_CONFIG_PATH=<prefix>/<libdir>/pkgconfig meson setup" % label,
                           p.returncode == 0,
                           "exit %d\n%s%s" % (p.returncode, p.stdout[-3000:], p.stderr[-2000:])):
                return None
            p = subprocess.run([args.meson, "compile", "-C", bdir], capture_output=True,
                               text=True, env=penv, timeout=300)
            if not c.check("%s: builds (-Werror)" % label,
                           p.returncode == 0, "exit %d\n%s%s" % (p.returncode, p.stdout[-3000:],
                                                                  p.stderr[-2000:])):
                return None
            return bdir

        def custom_dir(name, bdir):
            d = os.path.join(dest, name)
            os.mkdir(d)
            os.chmod(d, 0o755)
            for f in ("libmodel_gemma.so", "libattn_sinks.so", "arch_index.tsv"):
                shutil.copyfile(os.path.join(bdir, f), os.path.join(d, f))
                os.chmod(os.path.join(d, f), 0o644 if f.endswith(".tsv") else 0o755)
            return d

        bdir = build("gemma-build", [])
        if not bdir:
            return c.summary()
        cdir = custom_dir("plugins", bdir)
        gemma_so = os.path.join(cdir, "libmodel_gemma.so")
        sinks_so = os.path.join(cdir, "libattn_sinks.so")

        # ---- the kernels are the shared library's -----------------------------------------------
        nm = shutil.which("nm")
        if nm:
            for so, needs in ((gemma_so, []),
                              (sinks_so, ["lh_k_attention_positions", "lh_k_copy",
                                          "lh_k_alloc", "lh_k_free"])):
                defined, undefined = nm_symbols(nm, so)
                base = os.path.basename(so)
                c.check("%s: exports only lh_plugin_entry" % base,
                        {s for s in defined if not s.startswith("_")} == {"lh_plugin_entry"},
                        str(sorted(defined)))
                c.check("%s: no lh_k_* defined (no kernel code in the plugin)" % base,
                        not [s for s in defined if s.startswith("lh_k_")],
                        str(sorted(s for s in defined if s.startswith("lh_k_"))))
                if needs:
                    c.check("%s: imports %s (undefined in nm -D)" % (base, ", ".join(needs)),
                            all(s in undefined for s in needs),
                            "undefined: %s" % sorted(s for s in undefined if s.startswith("lh_")))
        else:
            c.skip("nm -D: kernels imported", "nm not found")
        readelf = shutil.which("readelf")
        if readelf:
            for so in (gemma_so, sinks_so):
                out = subprocess.run([readelf, "-d", so], capture_output=True, text=True,
                                     timeout=60).stdout
                needed = re.findall(r"\(NEEDED\).*\[(.*)\]", out)
                c.check("%s: does not need libllmhost" % os.path.basename(so),
                        not [n for n in needed if n.startswith("libllmhost.so")], str(needed))
            out = subprocess.run([readelf, "-d", sinks_so], capture_output=True, text=True,
                                 timeout=60).stdout
            c.check("libattn_sinks.so: needs libllmhost_kernels",
                    any(n.startswith("libllmhost_kernels.so")
                        for n in re.findall(r"\(NEEDED\).*\[(.*)\]", out)), out[-600:])
        else:
            c.skip("readelf -d: NEEDED", "readelf not found")

        sanitizer_reports = []
        renv = dict(env, LLMHOST_LOG="warn", LLMHOST_DEVICE="cpu")

        def run(cmd):
            p = subprocess.run(cmd, capture_output=True, text=True, env=renv, timeout=300,
                               stdin=subprocess.DEVNULL, cwd=dest)
            if "runtime error:" in p.stderr or "Sanitizer" in p.stderr:
                sanitizer_reports.append("%s: %s" % (" ".join(cmd[:2]), p.stderr[-1500:]))
            return p

        def fail_text(p):
            return "exit %d: %s%s" % (p.returncode, p.stdout[-1500:], p.stderr[-1500:])

        # ---- plugin check ---------------------------------------------------------------------
        p = run([exe, "plugin", "check", cdir])
        c.check("llmhost plugin check DIR: exit 0", p.returncode == 0, fail_text(p))
        p = run([exe, "plugin", "check", cdir, "--json"])
        try:
            rep = json.loads(p.stdout)
            regs = sorted((r.get("kind"), r.get("name")) for pl in rep.get("plugins", [])
                          for r in pl.get("registers", []))
        except (ValueError, AttributeError, TypeError):
            regs = None
        c.check("plugin check --json: registers model GemmaForCausalLM and "
                "attention_backend sinks",
                regs == [("attention_backend", "sinks"), ("model", "GemmaForCausalLM")],
                "%s (%s)" % (regs, fail_text(p)))

        # ---- resolve --------------------------------------------------------------------------
        model = os.path.join(fixtures, MODEL)
        ref = json.load(open(os.path.join(model, "reference.json"), encoding="utf-8"))
        p = run([exe, "resolve", model, "--custom-module-dir", cdir, "--json"])
        try:
            res = json.loads(p.stdout) if p.returncode == 0 else None
        except ValueError:
            res = None
        if c.check("llmhost resolve %s --custom-module-dir DIR" % MODEL, res is not None,
                   fail_text(p)):
            c.check("resolve: GemmaForCausalLM, origin external",
                    res.get("resolved_architecture") == "GemmaForCausalLM" and
                    res.get("origin") == "external", json.dumps(res)[:800])
            c.check("resolve: shared_object is DIR/libmodel_gemma.so",
                    os.path.realpath(res.get("shared_object", "")) == os.path.realpath(gemma_so),
                    str(res.get("shared_object")))
            c.check("resolve: only libmodel_gemma.so loaded (lazy index)",
                    [os.path.realpath(x) for x in res.get("loaded_plugins", [])] ==
                    [os.path.realpath(gemma_so)], str(res.get("loaded_plugins")))

        # ---- run: greedy ids ------------------------------------------------------------------
        def generate(mdir, prompts, n, plugin_dir, backend=None, extra=()):
            cmd = [exe, "run", mdir, "--custom-module-dir", plugin_dir, "-n", str(n), "--json"]
            for pr in prompts:
                cmd += ["--prompt-tokens", ",".join(str(t) for t in pr)]
            if backend:
                cmd += ["--attn-backend", backend]
            cmd += list(extra)
            p = run(cmd)
            try:
                outs = [json.loads(line)["tokens"] for line in p.stdout.splitlines()
                        if line.strip()] if p.returncode == 0 else None
            except (ValueError, KeyError):
                outs = None
            return outs, p

        prompts = ref["prompts"]
        default_ids, p = generate(model, prompts, N_NEW, cdir)
        if c.check("llmhost run %s (%d prompts, -n %d, default backend)" % (MODEL, len(prompts),
                                                                          N_NEW),
                   default_ids is not None and len(default_ids) == len(prompts), fail_text(p)):
            for i, (got, want) in enumerate(zip(default_ids, ref["greedy"])):
                c.check("run: prompt %d greedy ids == transformers'" % i, got == want,
                        "%s vs %s" % (got, want))

        # ---- logits ---------------------------------------------------------------------------
        def logits_diff(backend, i):
            out = os.path.join(dest, "logits_%s_%d.npy" % (backend or "default", i))
            cmd = [exe, "logits", model, "--custom-module-dir", cdir, "--tokens",
                   ",".join(str(t) for t in prompts[i]), "--out", out]
            if backend:
                cmd += ["--attn-backend", backend]
            p = run(cmd)
            if p.returncode != 0:
                return None, fail_text(p)
            shape, got = read_npy_f32(out)
            wshape, want = read_npy_f32(os.path.join(model, ref["logits_files"][i]))
            if shape != wshape:
                return None, "shape %s vs %s" % (shape, wshape)
            return max(abs(a - b) for a, b in zip(got, want)), ""

        for backend in (None, "sinks"):
            for i in range(len(prompts)):
                d, why = logits_diff(backend, i)
                c.check("logits%s: prompt %d vs logits_%d.npy max abs <= %g" %
                        (" --attn-backend sinks" if backend else "", i, i, LOGITS_TOL),
                        d is not None and d <= LOGITS_TOL,
                        why or "max abs difference %.3g" % d)

        # ---- the sinks backend ----------------------------------------------------------------
        sinks_ids, p = generate(model, prompts, N_NEW, cdir, "sinks")
        if c.check("llmhost run %s --attn-backend sinks" % MODEL, sinks_ids is not None,
                   fail_text(p)) and default_ids is not None:
            c.check("sinks: ids == the default backend's (the context fits in 4 + 1020 slots)",
                    sinks_ids == default_ids, "%s vs %s" % (sinks_ids, default_ids))
        swa = os.path.join(fixtures, SWA_MODEL)
        sref = json.load(open(os.path.join(swa, "reference.json"), encoding="utf-8"))
        swa_ids, p = generate(swa, sref["prompts"], N_NEW, cdir, "sinks")
        if c.check("llmhost run %s --attn-backend sinks (built-in model, custom backend)"
                   % SWA_MODEL, swa_ids is not None, fail_text(p)):
            c.check("sinks on %s: the model's window 8 in an 8-slot ring: ids == transformers' "
                    "greedy (prompt 1 has 20 tokens)" % SWA_MODEL, swa_ids == sref["greedy"],
                    "%s vs %s" % (swa_ids, sref["greedy"]))

        # a tiny ring: 2 sinks + 6 recent positions, generation far beyond it
        tdir = build("gemma-tiny-ring", ["-Dn_sinks=2", "-Dwindow=6"])
        if tdir:
            tcdir = custom_dir("plugins-tiny", tdir)
            n_long = 120
            ids, p = generate(model, [prompts[0]], n_long, tcdir, "sinks",
                              ["--max-seq-len", "256"])
            if c.check("tiny ring (2 + 6 slots): %d tokens generated past the ring" % n_long,
                       ids is not None and len(ids[0]) == n_long, fail_text(p)):
                # prompt 0 has 5 tokens: queries at positions <= 7 see everything
                fit = 8 - len(prompts[0]) + 1
                c.check("tiny ring: the first %d tokens (context within the ring) == "
                        "transformers'" % fit, ids[0][:fit] == ref["greedy"][0][:fit],
                        "%s vs %s" % (ids[0][:fit], ref["greedy"][0][:fit]))
        c.check("no sanitizer report from any run", not sanitizer_reports,
                "; ".join(sanitizer_reports))
    finally:
        shutil.rmtree(dest, ignore_errors=True)
    return c.summary()


if __name__ == "__main__":
    sys.exit(main())

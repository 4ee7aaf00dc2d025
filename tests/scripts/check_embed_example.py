#!/usr/bin/env python3
"""An application embedding the installed llmhost, built only through pkg-config.

Runs `DESTDIR=<tmp> meson install -C BUILDDIR --no-rebuild --quiet` (the .pc files are
relocatable, `pkgconfig.relocatable=true`, so the staged tree works where it lies; with a build
dir configured without it, the staged copies get their prefix= line rewritten), then:
  - `pkg-config --cflags --libs` of llmhost.pc and llmhost-plugin.pc, their variables
    (plugindir holds the built-in plugins and arch_index.tsv; abi_major/abi_minor equal
    lh_plugin.h's and `llmhost --version`'s), the installed headers compile with those flags;
  - examples/embed is configured with `PKG_CONFIG_PATH=<prefix>/<libdir>/pkgconfig meson
    setup` and built; run on tests/fixtures/models/llama-mha-f32 with prompt ids, it must
    generate what the installed `llmhost run --prompt-tokens` generates and print the explain
    section (device, backend); with a tokenizer.json next to the model it must stream the text
    and ids of `llmhost run -p`; its error paths (relative custom dir, malformed YAML text)
    exit with the error class and the message.
Nothing runs with LD_LIBRARY_PATH or an LLMHOST_* variable other than LLMHOST_DEVICE=cpu and
LLMHOST_LOG=warn.

Each check is one test case. Prints `LH-TEST-SUMMARY passed=P failed=F skipped=S`.

usage: check_embed_example.py --meson MESON --builddir BUILDDIR --source-root SRC
       [--pkg-config PKG_CONFIG] [--cc CC]
"""
import argparse
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lh_checker import Checker, clean_env, install_dirs, stage_install, under  # noqa: E402

MODEL = "llama-mha-f32"
PROMPT_IDS = [5, 7, 9, 11]
N_NEW = 8


def same(a, b):
    return os.path.realpath(a) == os.path.realpath(b)


def header_abi(path):
    """(major, minor) of LH_PLUGIN_ABI_* in lh_plugin.h."""
    text = open(path, encoding="utf-8").read()
    v = {}
    for name in ("MAJOR", "MINOR"):
        m = re.search(r"^#define LH_PLUGIN_ABI_%s (\d+)\s*$" % name, text, re.M)
        v[name] = m.group(1) if m else None
    return v["MAJOR"], v["MINOR"]


def parse_example(out):
    """The example's stdout: {prompt, stream, generated, stopped, device, backend}."""
    r = {}
    m = re.search(r"^prompt ids:(.*)$", out, re.M)
    r["prompt"] = [int(x) for x in m.group(1).split()] if m else None
    m = re.search(r"^stream: (.*)\ngenerated ids:", out, re.M | re.S)
    r["stream"] = m.group(1) if m else None
    m = re.search(r"^generated ids:(.*)$", out, re.M)
    r["generated"] = [int(x) for x in m.group(1).split()] if m else None
    for key in ("stopped", "device", "backend"):
        m = re.search(r"^%s: (.*)$" % key, out, re.M)
        r[key] = m.group(1) if m else None
    return r


def byte_tokenizer(src_json):
    """A byte-level tokenizer.json whose every id is below 256 (the fixture model's vocab):
    the vocab entries of src below 256, no merges."""
    d = json.load(open(src_json, encoding="utf-8"))
    d["model"]["vocab"] = {k: v for k, v in d["model"]["vocab"].items() if v < 256}
    d["model"]["merges"] = []
    d["added_tokens"] = [t for t in d.get("added_tokens", []) if t["id"] < 256]
    return json.dumps(d)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--meson", default="meson")
    ap.add_argument("--builddir", required=True)
    ap.add_argument("--source-root", required=True)
    ap.add_argument("--pkg-config", default=shutil.which("pkg-config") or "pkg-config")
    ap.add_argument("--cc", default=os.environ.get("CC") or shutil.which("cc") or "cc")
    args = ap.parse_args()
    c = Checker()
    src = os.path.realpath(args.source_root)
    fixtures = os.path.join(src, "tests", "fixtures")

    dirs = install_dirs(c, args.meson, args.builddir)
    if not dirs:
        return c.summary()
    prefix, libdir, bindir = dirs["prefix"], dirs["libdir"], dirs["bindir"]
    includedir, relocatable = dirs["includedir"], dirs["relocatable"]

    dest = tempfile.mkdtemp(prefix="lh-embed-")
    os.chmod(dest, 0o755)
    try:
        env = clean_env()
        root = stage_install(c, args.meson, args.builddir, dest)
        if not root:
            return c.summary()
        lib = under(root, libdir)
        inc = os.path.join(under(root, includedir), "llmhost")
        plugins = os.path.join(lib, "llmhost", "plugins")
        exe = os.path.join(under(root, bindir), "llmhost")
        pcdir = os.path.join(lib, "pkgconfig")

        # ---- the installed files -----------------------------------------------------------
        for pc in ("llmhost.pc", "llmhost-plugin.pc"):
            c.check("installed %s" % pc, os.path.isfile(os.path.join(pcdir, pc)), pcdir)
        want = ["llmhost.h"] + sorted(os.path.basename(h) for h in
                                      glob.glob(os.path.join(src, "plugin_api", "*.h")))
        missing = [h for h in want if not os.path.isfile(os.path.join(inc, h))]
        c.check("installed headers: llmhost.h and every plugin_api/*.h (%d)" % len(want),
                not missing, "missing in %s: %s" % (inc, ", ".join(missing)))
        for name in ("libllmhost", "libllmhost_kernels"):
            real = [f for f in glob.glob(os.path.join(lib, name + ".so.*"))
                    if not os.path.islink(f)]
            soname = ""
            if real and shutil.which("readelf"):
                out = subprocess.run(["readelf", "-d", real[0]], capture_output=True,
                                     text=True, timeout=60).stdout
                m = re.search(r"\(SONAME\).*\[(.*)\]", out)
                soname = m.group(1) if m else ""
                c.check("%s: versioned SONAME %s, linked as %s.so" % (name, soname, name),
                        re.fullmatch(re.escape(name) + r"\.so\.\d+", soname) is not None and
                        os.path.islink(os.path.join(lib, soname)) and
                        os.path.islink(os.path.join(lib, name + ".so")),
                        "SONAME '%s', files %s" % (soname, os.listdir(lib)))
            elif not real:
                c.check("%s: a versioned library file" % name, False, str(os.listdir(lib)))
            else:
                c.skip("%s: versioned SONAME" % name, "readelf not found")

        # ---- pkg-config ----------------------------------------------------------------------
        if not shutil.which(args.pkg_config) and not os.path.isfile(args.pkg_config):
            c.check("pkg-config found", False, args.pkg_config)
            return c.summary()
        if relocatable:
            texts = [open(os.path.join(pcdir, f)).read() for f in ("llmhost.pc",
                                                                   "llmhost-plugin.pc")]
            c.check("the .pc files are relocatable (prefix=${pcfiledir}/...)",
                    all(re.search(r"^prefix=\$\{pcfiledir\}/", t, re.M) for t in texts),
                    texts[0].splitlines()[0])
        else:
            c.skip("the .pc files are relocatable", "pkgconfig.relocatable is off in this "
                   "build dir; rewriting prefix= in the staged copies")
            for f in ("llmhost.pc", "llmhost-plugin.pc"):
                path = os.path.join(pcdir, f)
                t = open(path).read()
                t = re.sub(r"^prefix=.*$", "prefix=" + under(root, prefix), t, count=1,
                           flags=re.M)
                os.chmod(path, 0o644)
                open(path, "w").write(t)
        penv = dict(env, PKG_CONFIG_PATH=pcdir)

        def pkgconf(*a):
            p = subprocess.run([args.pkg_config, *a], capture_output=True, text=True,
                               env=penv, timeout=60)
            return p.returncode, p.stdout.strip(), p.stderr.strip()

        def flags(words, flag):
            return [w[len(flag):] for w in words if w.startswith(flag)]

        rc, out, errs = pkgconf("--cflags", "--libs", "llmhost")
        words = shlex.split(out)
        if c.check("pkg-config --cflags --libs llmhost", rc == 0, errs):
            c.check("llmhost.pc: -I<includedir>/llmhost",
                    any(same(d, inc) for d in flags(words, "-I")), out)
            c.check("llmhost.pc: -L<libdir> -lllmhost",
                    any(same(d, lib) for d in flags(words, "-L")) and "-lllmhost" in words, out)
        rc, out, errs = pkgconf("--cflags", "--libs", "llmhost-plugin")
        pwords = shlex.split(out)
        if c.check("pkg-config --cflags --libs llmhost-plugin", rc == 0, errs):
            c.check("llmhost-plugin.pc: -I<includedir>/llmhost",
                    any(same(d, inc) for d in flags(pwords, "-I")), out)
            c.check("llmhost-plugin.pc: -L<libdir> -lllmhost_kernels, not -lllmhost",
                    any(same(d, lib) for d in flags(pwords, "-L")) and
                    "-lllmhost_kernels" in pwords and "-lllmhost" not in pwords, out)
        rc, out, errs = pkgconf("--variable=plugindir", "llmhost-plugin")
        c.check("llmhost-plugin.pc: plugindir is <libdir>/llmhost/plugins with arch_index.tsv",
                rc == 0 and same(out, plugins) and
                os.path.isfile(os.path.join(out, "arch_index.tsv")),
                "%r (%s), expected %s" % (out, errs, plugins))
        major, minor = header_abi(os.path.join(inc, "lh_plugin.h"))
        rc1, pmaj, _ = pkgconf("--variable=abi_major", "llmhost-plugin")
        rc2, pmin, _ = pkgconf("--variable=abi_minor", "llmhost-plugin")
        c.check("llmhost-plugin.pc: abi_major.abi_minor = lh_plugin.h's %s.%s" % (major, minor),
                major is not None and (pmaj, pmin) == (major, minor),
                "pkg-config says %s.%s" % (pmaj, pmin))
        rc, out, errs = pkgconf("--modversion", "llmhost")
        c.check("llmhost.pc: version %s" % out, rc == 0 and out != "", errs)
        renv = dict(env, LLMHOST_LOG="warn", LLMHOST_DEVICE="cpu")
        p = subprocess.run([exe, "--version"], capture_output=True, text=True, env=renv,
                           timeout=60)
        c.check("installed llmhost --version names plugin ABI %s.%s" % (major, minor),
                p.returncode == 0 and "plugin ABI %s.%s" % (major, minor) in p.stdout,
                "exit %d: %s%s" % (p.returncode, p.stdout, p.stderr))

        # every installed header compiles on its own with the .pc flags
        cc = args.cc
        if shutil.which(cc) or os.path.isfile(cc):
            bad = []
            for h, w in [("llmhost.h", words)] + [(x, pwords) for x in want if x != "llmhost.h"]:
                cfile = os.path.join(dest, "inc_%s.c" % h.replace(".", "_"))
                open(cfile, "w").write('#include <%s>\nint main(void) { return 0; }\n' % h)
                p = subprocess.run([cc, "-std=c17", "-Wall", "-Wextra", "-Werror",
                                    "-fsyntax-only", cfile] + ["-I" + d for d in flags(w, "-I")],
                                   capture_output=True, text=True, timeout=120)
                if p.returncode != 0:
                    bad.append("%s: %s" % (h, p.stderr.strip()[:300]))
            c.check("each installed header compiles alone with the pkg-config cflags", not bad,
                    "; ".join(bad))
        else:
            c.skip("installed headers compile", "no C compiler (%s)" % cc)

        # ---- examples/embed, built against the staged install --------------------------------
        exdir = os.path.join(dest, "embed-build")
        setup = [args.meson, "setup", exdir, os.path.join(src, "examples", "embed"),
                 "-Dwerror=true"]
        # a sanitized libllmhost needs a sanitized application (the runtime comes first)
        sanitize = dirs["b_sanitize"]
        if sanitize not in (None, "none", ""):
            setup.append("-Db_sanitize=" + (",".join(sanitize) if isinstance(sanitize, list)
                                            else sanitize))
        p = subprocess.run(setup, capture_output=True, text=True, env=penv, timeout=300)
        if not c.check("examples/embed: PKG_CONFIG_PATH=<prefix>/<libdir>/pkgconfig meson setup",
                       p.returncode == 0, "exit %d\n%s%s" % (p.returncode, p.stdout[-3000:],
                                                             p.stderr[-2000:])):
            return c.summary()
        p = subprocess.run([args.meson, "compile", "-C", exdir], capture_output=True, text=True,
                           env=penv, timeout=300)
        if not c.check("examples/embed: builds (-Werror)", p.returncode == 0,
                       "exit %d\n%s%s" % (p.returncode, p.stdout[-3000:], p.stderr[-2000:])):
            return c.summary()
        example = os.path.join(exdir, "embed_example")
        model = os.path.join(fixtures, "models", MODEL)

        sanitizer_reports = []

        def run(cmd, **kw):
            p = subprocess.run(cmd, capture_output=True, text=True, env=renv, timeout=120,
                               stdin=subprocess.DEVNULL, cwd=dest, **kw)
            if "runtime error:" in p.stderr or "Sanitizer" in p.stderr:
                sanitizer_reports.append("%s: %s" % (" ".join(cmd[:2]), p.stderr[-1500:]))
            return p

        ids = ",".join(str(i) for i in PROMPT_IDS)
        p = run([exe, "run", model, "--prompt-tokens", ids, "-n", str(N_NEW), "--json"])
        try:
            ref = json.loads(p.stdout) if p.returncode == 0 else None
        except ValueError:
            ref = None
        c.check("installed llmhost run --prompt-tokens %s -n %d" % (ids, N_NEW), ref is not None,
                "exit %d: %s" % (p.returncode, p.stderr.strip()))
        p = run([example, "--ids", ids, "-n", str(N_NEW), model])
        ex = parse_example(p.stdout)
        if c.check("embed_example on %s (no LD_LIBRARY_PATH)" % MODEL, p.returncode == 0,
                   "exit %d: %s%s" % (p.returncode, p.stdout, p.stderr)):
            c.check("embed_example: prompt ids as given", ex["prompt"] == PROMPT_IDS,
                    str(ex["prompt"]))
            if ref is not None:
                c.check("embed_example: generated ids == llmhost run's",
                        ex["generated"] == ref.get("tokens") and
                        len(ex["generated"] or []) == N_NEW,
                        "%s vs %s" % (ex["generated"], ref.get("tokens")))
                c.check("embed_example: stopped == llmhost run's",
                        ex["stopped"] == ref.get("stopped"), "%s vs %s" % (ex["stopped"],
                                                                          ref.get("stopped")))
            c.check("embed_example: streamed ids == generated ids",
                    ex["stream"] is not None and
                    [int(x) for x in ex["stream"].split()] == ex["generated"], str(ex["stream"]))
            c.check("embed_example: explain section (device cpu, backend paged)",
                    ex["device"] == "cpu" and ex["backend"] == "paged",
                    "device %s backend %s" % (ex["device"], ex["backend"]))

        # the text path: the fixture model with a byte-level tokenizer.json next to it
        tmodel = os.path.join(dest, "model-with-tokenizer")
        os.mkdir(tmodel)
        for f in ("config.json", "model.safetensors", "generation_config.json"):
            os.symlink(os.path.join(model, f), os.path.join(tmodel, f))
        open(os.path.join(tmodel, "tokenizer.json"), "w").write(
            byte_tokenizer(os.path.join(fixtures, "tokenizers", "bpe_smollm.json")))
        text = "Hello world"
        p = run([exe, "run", tmodel, "-p", text, "-n", str(N_NEW), "--json"])
        try:
            tref = json.loads(p.stdout)["outputs"][0] if p.returncode == 0 else None
        except (ValueError, KeyError, IndexError):
            tref = None
        c.check("installed llmhost run -p %r" % text, tref is not None,
                "exit %d: %s%s" % (p.returncode, p.stdout, p.stderr.strip()))
        p = run([example, "--prompt", text, "-n", str(N_NEW), tmodel])
        ex = parse_example(p.stdout)
        if c.check("embed_example --prompt %r (tokenizer.json)" % text, p.returncode == 0,
                   "exit %d: %s%s" % (p.returncode, p.stdout, p.stderr)) and tref is not None:
            c.check("embed_example: text ids and generated ids == llmhost run -p's",
                    ex["generated"] == tref.get("ids"), "%s vs %s" % (ex["generated"],
                                                                      tref.get("ids")))
            c.check("embed_example: streamed text == llmhost run -p's text",
                    ex["stream"] == tref.get("text"), "%r vs %r" % (ex["stream"],
                                                                    tref.get("text")))

        # a malformed tokenizer.json: a config error naming the file
        bmodel = os.path.join(dest, "model-bad-tokenizer")
        os.mkdir(bmodel)
        for f in ("config.json", "model.safetensors"):
            os.symlink(os.path.join(model, f), os.path.join(bmodel, f))
        open(os.path.join(bmodel, "tokenizer.json"), "w").write('{"model": {"type": "BPE",\n')
        p = run([example, "--prompt", text, bmodel])
        c.check("embed_example with a malformed tokenizer.json: exit 3, the file named",
                p.returncode == 3 and "tokenizer.json" in p.stderr,
                "exit %d: %s" % (p.returncode, p.stderr.strip()))

        # a custom module dir: an absolute dir with an index that offers nothing is declared
        # (the built-in plugins still serve the model); a relative one is refused
        cdir = os.path.join(dest, "custom")
        os.mkdir(cdir, 0o755)
        os.chmod(cdir, 0o755)
        index = os.path.join(cdir, "arch_index.tsv")
        open(index, "w").write("#llmhost-arch-index\t1\n#kind\tname\tshared_object\n")
        os.chmod(index, 0o644)
        p = run([example, "--custom-module-dir", cdir, "--ids", ids, "-n", "2", model])
        c.check("embed_example --custom-module-dir ABS (an index offering nothing) runs",
                p.returncode == 0, "exit %d: %s" % (p.returncode, p.stderr.strip()))
        p = run([example, "--custom-module-dir", "custom", "--ids", ids, "-n", "2", model])
        c.check("embed_example --custom-module-dir relative: exit 9 (insecure), message",
                p.returncode == 9 and "custom" in p.stderr and "insecure" in p.stderr,
                "exit %d: %s" % (p.returncode, p.stderr.strip()))
        # a malformed run config text: a config error with line:column
        p = run([example, "--config-text", "max_seq_len: 64\nkv_cache:\n  blok_size: 4\n",
                 "--ids", ids, model])
        c.check("embed_example --config-text with a bad key: exit 3, <config_text>:3:3",
                p.returncode == 3 and "<config_text>:3:3: unknown key 'blok_size'" in p.stderr,
                "exit %d: %s" % (p.returncode, p.stderr.strip()))
        p = run([example, "--ids", "1,x", model])
        c.check("embed_example --ids 1,x: usage, exit 2", p.returncode == 2,
                "exit %d: %s" % (p.returncode, p.stderr.strip()))
        c.check("no sanitizer report from any run", not sanitizer_reports,
                "; ".join(sanitizer_reports))
    finally:
        shutil.rmtree(dest, ignore_errors=True)
    return c.summary()


if __name__ == "__main__":
    sys.exit(main())

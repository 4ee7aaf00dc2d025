"""The CUDA half of the kernel library is loaded only when CUDA is used (kernels/cuda_load.c):

- no binary or library but libllmhost_kernels_cuda.so has cudart or cuBLAS among its NEEDED
  entries (libllmhost_kernels, libllmhost, llmhost, every built-in plugin);
- with the CUDA kernels library unreachable (LLMHOST_KERNELS_CUDA=/nonexistent), or loading
  but missing a library it needs (a stub whose dependency is not installed), `llmhost
  --version`, `list`, `resolve` and `explain` (405B config) exit 0, explain's device section
  and `backends` give the reason, `--device cuda` fails with exit 14 naming it, and `auto`
  takes the CPU and says why;
- CPU commands map nothing of CUDA (LD_DEBUG=files lists every object the loader opens).

    check_cuda_split.py --llmhost EXE --readelf READELF --stub-needs-gone STUB.so
                        [--cuda-lib LIB.so] FILE.so...
Prints `LH-TEST-SUMMARY passed=P failed=F skipped=S`."""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from lh_checker import Checker  # noqa: E402

CUDA_LIBS = ("libcudart", "libcublas", "libcublasLt", "libcuda.so")
EXIT_UNSUPPORTED = 14


def needed(readelf, path):
    out = subprocess.run([readelf, "-d", path], capture_output=True, text=True,
                         timeout=60).stdout
    return [line.split("[", 1)[1].rstrip("]").strip() for line in out.splitlines()
            if "(NEEDED)" in line and "[" in line]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llmhost", required=True)
    ap.add_argument("--readelf")
    ap.add_argument("--stub-needs-gone", required=True)
    ap.add_argument("--cuda-lib", default="")
    ap.add_argument("--config", required=True, help="the 405B config directory")
    ap.add_argument("files", nargs="*")
    args = ap.parse_args()
    c = Checker()

    # 1. NEEDED entries
    if args.readelf:
        for f in [args.llmhost] + args.files:
            bad = [n for n in needed(args.readelf, f) if n.startswith(CUDA_LIBS)]
            c.check("no cudart/cuBLAS NEEDED: %s" % os.path.basename(f), not bad, ", ".join(bad))
        if args.cuda_lib:
            n = needed(args.readelf, args.cuda_lib)
            c.check("libllmhost_kernels_cuda.so needs cuBLAS", any("cublas" in x for x in n),
                    ", ".join(n))
    else:
        c.skip("NEEDED entries", "readelf not found")

    base = {k: v for k, v in os.environ.items() if not k.startswith("LLMHOST_")}
    base["LLMHOST_LOG"] = "warn"

    def run(extra, *argv):
        env = dict(base)
        env.update(extra)
        return subprocess.run([args.llmhost] + list(argv), capture_output=True, text=True,
                              env=env, timeout=120)

    # 2. the CUDA library unreachable in two ways
    cases = [("missing", {"LLMHOST_KERNELS_CUDA": "/nonexistent/libllmhost_kernels_cuda.so"},
              "the CUDA kernels library is missing: /nonexistent/libllmhost_kernels_cuda.so"),
             ("cuBLAS missing", {"LLMHOST_KERNELS_CUDA": args.stub_needs_gone},
              "liblh_cuda_stub_gone.so.1: cannot open shared object file")]
    for label, env, reason in cases:
        for argv in (["--version"], ["list"], ["resolve", args.config],
                     ["explain", args.config]):
            p = run(env, *argv)
            c.check("%s: llmhost %s exits 0" % (label, argv[0]), p.returncode == 0,
                    "exit %d: %s" % (p.returncode, p.stderr.strip()[-400:]))
        p = run(env, "explain", args.config)
        dev = [line for line in p.stdout.splitlines() if line.startswith("device:")]
        c.check("%s: explain (auto) takes the CPU and says why" % label,
                bool(dev) and dev[0].startswith("device: cpu (auto: no CUDA device (")
                and reason in dev[0], dev[0] if dev else p.stdout[-400:])
        p = run(env, "explain", args.config, "--device", "cuda")
        c.check("%s: explain --device cuda exits %d" % (label, EXIT_UNSUPPORTED),
                p.returncode == EXIT_UNSUPPORTED, "exit %d" % p.returncode)
        c.check("%s: --device cuda names the reason" % label,
                "device cuda:0 (from --device) is not available" in p.stderr
                and reason in p.stderr, p.stderr.strip()[-400:])
        p = run(env, "backends")
        c.check("%s: backends exits 0 and gives the reason" % label,
                p.returncode == 0 and "cuda: unavailable (" in p.stdout
                and reason in p.stdout, "exit %d: %s" % (p.returncode, p.stdout[-400:]))
        p = run(env, "backends", "--json")
        c.check("%s: backends --json gives the reason" % label,
                p.returncode == 0 and reason in p.stdout, p.stdout[-400:])

    # 3. CPU commands map nothing of CUDA (the real library where the build has one)
    for argv in (["--version"], ["list"], ["resolve", args.config],
                 ["explain", args.config, "--device", "cpu"]):
        p = run({"LD_DEBUG": "files"}, *argv)
        opened = [line for line in p.stderr.splitlines() if "file=" in line and
                  ("cublas" in line or "cudart" in line or "libllmhost_kernels_cuda" in line)]
        c.check("llmhost %s loads no CUDA library" % " ".join(argv[:1] + argv[2:]),
                p.returncode == 0 and not opened,
                "exit %d; %s" % (p.returncode, "; ".join(opened[:3])))
    if args.cuda_lib:
        # the probe asks the driver first: without one (no libcuda.so.1) nothing of CUDA is
        # mapped and backends says why; with one, backends loads the CUDA kernels library
        p = run({"LD_DEBUG": "files"}, "backends")
        has_driver = ctypes_util_find("cuda")
        if has_driver:
            c.check("llmhost backends loads libllmhost_kernels_cuda.so (a CUDA build with a "
                    "driver)", p.returncode == 0 and "libllmhost_kernels_cuda.so" in p.stderr,
                    "exit %d" % p.returncode)
        else:
            opened = [line for line in p.stderr.splitlines() if "file=" in line and
                      ("cublas" in line or "libllmhost_kernels_cuda" in line)]
            q = run({}, "backends")
            c.check("llmhost backends without a CUDA driver maps no CUDA library and says why",
                    p.returncode == 0 and not opened and "no CUDA driver" in q.stdout,
                    "exit %d; %s; %s" % (p.returncode, "; ".join(opened[:2]), q.stdout[-300:]))
    return c.summary()


def ctypes_util_find(name):
    """Whether the dynamic loader can load lib<name>.so.1 (the CUDA driver: libcuda.so.1)."""
    import ctypes
    try:
        ctypes.CDLL("lib%s.so.1" % name)
        return True
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(main())

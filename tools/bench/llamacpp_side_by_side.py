#!/usr/bin/env python3
"""Side by side with llama.cpp on the same GGUF files (a benchmark, not a test; see
docs/benchmarks.md, "GGUF side by side with llama.cpp").

    llamacpp_side_by_side.py [--llmhost PATH] [--threads 1,2] [--reps 3] [--out FILE.json]
                             FILE.gguf...

For every file and thread count, in the same run, alternating the two runtimes (the one that
goes first swaps each repetition, so the shared machine's load weighs on both alike), REPS
repetitions each, medians reported:
  pp512  prefill tok/s: 512 prompt tokens / (time of the one step that prefills them + the
         greedy choice of the first new token);
  tg128  decode tok/s: 128 / (time of 128 single-token decode steps after a 16-token prompt,
         each feeding back the greedy choice of the one before).
llama.cpp runs in this process through llama-cpp-python's low-level binding (llama_cpp, the
C API: llama_model_load_from_file, llama_init_from_model with n_ctx 1024, n_batch = n_ubatch
512, n_threads = n_threads_batch = THREADS, every other parameter at llama.cpp's default --
mmap, flash attention "auto", F16 KV cache, CPU weight repacking on), loaded once per (file,
threads) and warmed by one 16-token prompt; each step is one llama_decode of
llama_batch_get_one(tokens) (logits of the last token only), timed with time.perf_counter
around llama_decode and the argmax of its logits; the KV cache is cleared before each
measurement. llmhost runs as `llmhost bench FILE --device cpu --threads THREADS --json
--warmup 0` in a child process per measurement (its own timings: lh_engine_last_stats,
CLOCK_MONOTONIC), with a 16-token cell first that warms the mapping and the caches:
  pp512: --context 16,512 -n 1   (the 512 cell's prefill_tok_s)
  tg128: --context 16 -n 129     (decode_tok_s: 128 decode steps)
Decode bound: a decode step reads every weight once (the tied embedding once, as the output
layer; the one embedding row it gathers and the KV cache of <= 144 positions are left out),
so bound tok/s = read bandwidth / tensor bytes of the file. The read bandwidth is measured here
with THREADS threads, best of 5 full reads (the read loop of tools/bench/bench_inference.c, in
a small C function compiled here with cc -O3 -march=native at run time, so vectorized) of a
1 GiB anonymous buffer (at the start and at the end; the best is the DRAM figure) and of the
file's own page-cache mapping (before and after its runs); a file's bound uses the best of
these, as a file smaller than the last-level cache reads faster than DRAM while it stays there
(other load only ever lowers a reading).
The machine is shared: before each measurement the script waits (--quiet-wait, 60 s at most)
until the cores the run needs are free of other runnable tasks, and reports the measurements
that started without that.

Needs llama-cpp-python, gguf and numpy in a virtual environment outside the repository, built
without AMX (a native build with AMX dies in prompt processing of quantized files on our VM):
    CMAKE_ARGS="-DGGML_NATIVE=OFF ... -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF
    -DGGML_AMX_BF16=OFF" /tmp/llamacpp-venv/bin/pip install llama-cpp-python
(the exact command is in docs/benchmarks.md). Prints progress to stderr and a Markdown table
to stdout; --out writes every sample as JSON. Exit status: 0 ok, 1 a runtime failed, 2 usage.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from read_bandwidth import Bandwidth

try:
    import gguf
    import llama_cpp
except ImportError as e:  # pragma: no cover - a usage error, reported as one line
    sys.exit(f"llamacpp_side_by_side.py needs llama-cpp-python, gguf and numpy ({e}); see "
             "docs/benchmarks.md")

ROOT = Path(__file__).resolve().parent.parent.parent
PP = 512
TG = 128
TG_PROMPT = 16
N_CTX = 1024
N_BATCH = 512

def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---- the files -------------------------------------------------------------------------------

def file_info(path: Path) -> dict:
    r = gguf.GGUFReader(str(path))
    types: dict[str, int] = {}
    tensor_bytes = 0
    names = set()
    for t in r.tensors:
        tensor_bytes += int(t.n_bytes)
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
        names.add(t.name)
    vocab = None
    f = r.fields.get("llama.vocab_size")
    if f is not None:
        vocab = int(f.parts[f.data[0]][0])
    return {"path": str(path), "file_bytes": path.stat().st_size, "tensor_bytes": tensor_bytes,
            "tied": "output.weight" not in names, "types": types, "vocab": vocab}


def synth_tokens(n: int, vocab: int, salt: int) -> list[int]:
    """Deterministic pseudo-random ids inside the vocabulary."""
    rng = np.random.default_rng(1234 + salt)
    return [int(x) for x in rng.integers(0, vocab, size=n)]


# ---- llama.cpp -------------------------------------------------------------------------------

_LOG_CB = llama_cpp.llama_log_callback(
    lambda level, text, _: sys.stderr.write(text.decode(errors="replace"))
    if level == 4 else None)  # GGML_LOG_LEVEL_ERROR only


class LlamaCpp:
    def __init__(self, path: Path, threads: int) -> None:
        mp = llama_cpp.llama_model_default_params()
        mp.n_gpu_layers = 0
        self.model = llama_cpp.llama_model_load_from_file(str(path).encode(), mp)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {path}")
        cp = llama_cpp.llama_context_default_params()
        cp.n_ctx = N_CTX
        cp.n_batch = N_BATCH
        cp.n_ubatch = N_BATCH
        cp.n_threads = threads
        cp.n_threads_batch = threads
        self.ctx = llama_cpp.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise RuntimeError(f"llama.cpp could not make a context for {path}")
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(self.model))
        self.mem = llama_cpp.llama_get_memory(self.ctx)
        self.flash_attn = cp.flash_attn_type
        self.decode(synth_tokens(TG_PROMPT, self.n_vocab, 99))  # warm-up
        self.clear()

    def clear(self) -> None:
        llama_cpp.llama_memory_clear(self.mem, True)

    def decode(self, tokens: list[int]) -> int:
        """One llama_decode of the tokens; the greedy choice from the last one's logits."""
        arr = (llama_cpp.llama_token * len(tokens))(*tokens)
        rc = llama_cpp.llama_decode(self.ctx, llama_cpp.llama_batch_get_one(arr, len(tokens)))
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self.ctx, -1),
                                       shape=(self.n_vocab,))
        return int(logits.argmax())

    def pp(self, n: int) -> float:
        self.clear()
        toks = synth_tokens(n, self.n_vocab, 1)
        t0 = time.perf_counter()
        self.decode(toks)
        return n / (time.perf_counter() - t0)

    def tg(self, n: int) -> float:
        self.clear()
        tok = self.decode(synth_tokens(TG_PROMPT, self.n_vocab, 2))
        t0 = time.perf_counter()
        for _ in range(n):
            tok = self.decode([tok])
        return n / (time.perf_counter() - t0)

    def close(self) -> None:
        llama_cpp.llama_free(self.ctx)
        llama_cpp.llama_model_free(self.model)


# ---- llmhost ---------------------------------------------------------------------------------

def llmhost_bench(exe: Path, path: Path, threads: int, contexts: str, n: int) -> dict:
    cmd = [str(exe), "bench", str(path), "--device", "cpu", "--threads", str(threads),
           "--json", "--warmup", "0", "--context", contexts, "-n", str(n)]
    p = subprocess.run(cmd, capture_output=True, text=True,
                       env={**os.environ, "LLMHOST_LOG": "error"})
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()}")
    return json.loads(p.stdout)


def ours_pp(exe: Path, path: Path, threads: int) -> tuple[float, dict]:
    j = llmhost_bench(exe, path, threads, f"{TG_PROMPT},{PP}", 1)
    return j["cells"][-1]["prefill_tok_s"], j


def ours_tg(exe: Path, path: Path, threads: int) -> tuple[float, dict]:
    j = llmhost_bench(exe, path, threads, str(TG_PROMPT), TG + 1)
    c = j["cells"][-1]
    assert c["decode_tokens"] == TG, c
    return c["decode_tok_s"], j


# ---- the machine's other load ----------------------------------------------------------------

def running() -> int:
    """Runnable tasks on the machine now, this process excluded (/proc/loadavg's 4th field
    counts the reader)."""
    try:
        return max(0, int(Path("/proc/loadavg").read_text().split()[3].split("/")[0]) - 1)
    except (OSError, ValueError, IndexError):
        return 0


def wait_quiet(max_wait: float, threads: int) -> tuple[bool, float]:
    """Wait (at most max_wait s) until, for 1 s (5 looks, 0.2 s apart), no more other tasks are
    runnable than there are cores the run leaves free (os.cpu_count() - threads): on 2 shared
    cores, another build makes a 2-thread run share a core with it, which llama.cpp's spinning
    thread barrier takes far worse than llmhost's pool. Returns (quiet, seconds waited)."""
    allowed = max(0, (os.cpu_count() or 1) - threads)
    t0 = time.perf_counter()
    calm = 0
    while calm < 5:
        if time.perf_counter() - t0 > max_wait:
            return False, time.perf_counter() - t0
        calm = calm + 1 if running() <= allowed else 0
        time.sleep(0.2)
    return True, time.perf_counter() - t0


# ---- the run ---------------------------------------------------------------------------------

def machine() -> str:
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}"


def llc() -> str:
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("L3 cache:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


def fmt(v: float | None, nd: int = 1) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--llmhost", type=Path, default=ROOT / "build" / "host" / "llmhost")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (1,2)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions per runtime and test (3)")
    ap.add_argument("--out", type=Path, help="write every sample as JSON here")
    ap.add_argument("--quiet-wait", type=float, default=60.0,
                    help="before each measurement wait up to this many seconds until no more "
                         "other tasks are runnable than the run leaves cores free (60; 0: do "
                         "not wait)")
    args = ap.parse_args(argv)
    threads = [int(t) for t in args.threads.split(",")]
    if not args.llmhost.is_file() or not os.access(args.llmhost, os.X_OK):
        log(f"llamacpp_side_by_side.py: {args.llmhost} is not an executable")
        return 2
    for f in args.files:
        if not f.is_file():
            log(f"llamacpp_side_by_side.py: {f}: no such file")
            return 2

    llama_cpp.llama_backend_init()
    llama_cpp.llama_log_set(_LOG_CB, ctypes.c_void_p(0))
    sysinfo = llama_cpp.llama_print_system_info().decode().strip()
    if "AMX" in sysinfo:
        log(f"warning: this llama.cpp build has AMX on ({sysinfo})")
    bw = Bandwidth()
    anon = {}
    for t in threads:
        wait_quiet(args.quiet_wait, t)
        anon[t] = bw.anon(t)
    log("read bandwidth, anonymous 1 GiB: " +
        ", ".join(f"{t} thread(s) {anon[t]:.1f} GB/s" for t in threads))
    seen_bw = {t: [("anonymous 1 GiB, start", anon[t])] for t in threads}

    rows = []
    t_start = time.perf_counter()
    for path in args.files:
        info = file_info(path)
        for t in threads:
            wait_quiet(args.quiet_wait, t)
            fbw = bw.file(path, t)
            seen_bw[t].append((f"{path.name} mapping, before", fbw))
            log(f"{path.name}, {t} thread(s): tensor bytes {info['tensor_bytes'] / 1e6:.1f} MB, "
                f"file-mapping read {fbw:.1f} GB/s")
            lc = LlamaCpp(path, t)
            samples = {"llama_pp": [], "ours_pp": [], "llama_tg": [], "ours_tg": []}
            loads = {k: [] for k in samples}
            ours_weight_bytes = None
            for r in range(args.reps):
                order = ("llama", "ours") if r % 2 == 0 else ("ours", "llama")
                for test in ("pp", "tg"):
                    for who in order:
                        quiet, waited = wait_quiet(args.quiet_wait, t)
                        if who == "llama":
                            v = lc.pp(PP) if test == "pp" else lc.tg(TG)
                        else:
                            v, j = (ours_pp if test == "pp" else ours_tg)(args.llmhost, path, t)
                            ours_weight_bytes = j.get("weight_bytes_per_step")
                        load1 = os.getloadavg()[0]
                        samples[f"{who}_{test}"].append(v)
                        loads[f"{who}_{test}"].append({"quiet": quiet, "load1": load1})
                        log(f"  rep {r + 1} {test}: {who:5s} {v:8.1f} tok/s   (waited "
                            f"{waited:.0f} s, {'quiet' if quiet else 'BUSY'} at start, "
                            f"load1 {load1:.1f} after)")
            lc.close()
            wait_quiet(args.quiet_wait, t)
            fbw_after = bw.file(path, t)
            seen_bw[t].append((f"{path.name} mapping, after", fbw_after))
            med = {k: statistics.median(v) for k, v in samples.items()}
            busy = sum(not x["quiet"] for v in loads.values() for x in v)
            rows.append({"file": path.name, "threads": t, "info": info, "samples": samples,
                         "load": loads, "busy_samples": busy,
                         "median": med, "file_bw_gbs": max(fbw, fbw_after),
                         "llmhost_weight_bytes_per_step": ours_weight_bytes,
                         "llamacpp_flash_attn_type": lc.flash_attn})
    for t in threads:
        wait_quiet(args.quiet_wait, t)
        seen_bw[t].append(("anonymous 1 GiB, end", bw.anon(t)))
    # DRAM read bandwidth: the best 1 GiB anonymous read with that many threads (each is a best
    # of 5 already; other tasks only ever lower it). A file's bound uses the better of that and
    # of reading the file's own mapping (before and after its runs): a file smaller than the
    # last-level cache reads faster than DRAM while it stays there.
    best_bw = {t: max(v for k, v in seen_bw[t] if k.startswith("anonymous")) for t in threads}
    for row in rows:
        row["bandwidth_gbs"] = max(best_bw[row["threads"]], row["file_bw_gbs"])
        row["decode_bound_tok_s"] = row["bandwidth_gbs"] * 1e9 / row["info"]["tensor_bytes"]
    elapsed = time.perf_counter() - t_start

    print(f"machine: {machine()}")
    print(f"llama.cpp: llama-cpp-python {llama_cpp.__version__}, AMX off; {sysinfo}")
    print(f"llmhost: {args.llmhost}")
    print(f"{args.reps} repetitions per runtime and test, medians; {elapsed / 60:.1f} minutes")
    for t in threads:
        vals = [v for k, v in seen_bw[t] if k.startswith("anonymous")]
        print(f"read bandwidth of 1 GiB anonymous memory, {t} thread(s): {best_bw[t]:.1f} GB/s "
              f"(best of {len(vals)} measurements: " + ", ".join(f"{v:.1f}" for v in vals) + ")")
    print(f"last-level cache: {llc()}")
    print()
    print("| file | threads | llama.cpp tg128 | llmhost tg128 | ratio | bandwidth bound | "
          "llama.cpp pp512 | llmhost pp512 | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        m = row["median"]
        print(f"| {row['file']} | {row['threads']} | {fmt(m['llama_tg'])} | {fmt(m['ours_tg'])}"
              f" | {fmt(m['ours_tg'] / m['llama_tg'], 2)} | {fmt(row['decode_bound_tok_s'])} "
              f"({row['bandwidth_gbs']:.1f} GB/s / {row['info']['tensor_bytes'] / 1e6:.0f} MB) "
              f"| {fmt(m['llama_pp'])} | {fmt(m['ours_pp'])} "
              f"| {fmt(m['ours_pp'] / m['llama_pp'], 2)} |")
    print()
    print("ratio = llmhost / llama.cpp (above 1: llmhost is faster).")
    busy = [f"{r['file']} x{r['threads']}: {r['busy_samples']}/{4 * args.reps}" for r in rows
            if r["busy_samples"]]
    print("Measurements that started while other tasks held the cores they need (no quiet "
          "second within "
          f"--quiet-wait {args.quiet_wait:.0f} s): " + (", ".join(busy) if busy else "none") + ".")
    print("Tensor types per file:")
    seen = set()
    for row in rows:
        if row["file"] in seen:
            continue
        seen.add(row["file"])
        types = ", ".join(f"{k} x{v}" for k, v in sorted(row["info"]["types"].items()))
        print(f"- {row['file']}: {row['info']['file_bytes'] / 1e6:.1f} MB; {types}")
    if args.out:
        args.out.write_text(json.dumps({"machine": machine(), "llama_cpp_system_info": sysinfo,
                                        "llama_cpp_python": llama_cpp.__version__,
                                        "bandwidth_gbs": seen_bw, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RuntimeError as e:
        log(f"llamacpp_side_by_side.py: {e}")
        sys.exit(1)

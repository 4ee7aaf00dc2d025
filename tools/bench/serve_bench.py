#!/usr/bin/env python3
"""Serving benchmark for OpenAI-compatible servers (a benchmark, not a test): `llmhost serve`
and llama.cpp's `llama-server` on the same workload, in the same run.

    serve_bench.py --server [NAME=]CMD [--server [NAME=]CMD] | --url [NAME=]URL ...
                   [--side-by-side CMD_A CMD_B] [--clients 1,8,32] [--requests-per-client 4]
                   [--reps 1] [--prompt-lens 32,64,128,256,512] [--output-lens 32,64,128]
                   [--shared-prefix N] [--seed 0] [--autogroup-nice N] [--out FILE.json]
    serve_bench.py --report FILE.json [--ratio A/B]   (the tables of an earlier run)

CMD is a shell-free command line (split with shlex); `{port}` in it is replaced by a free
loopback port the script picked, e.g.
    --server 'llmhost=/tmp/build-bench2/host/llmhost serve MODEL.gguf --port {port} --threads 2'
    --server 'llama-server=/tmp/lcs/build/bin/llama-server -m MODEL.gguf --port {port} -t 2 ...'
(--url connects to a server that is already running instead; only 127.0.0.0/8, localhost and
::1 are accepted: the benchmark sends traffic to this machine only). Each server's stdout and
stderr go to --log-dir. Two servers make a side-by-side run: both are started (and kept
running) and, for every concurrency point and repetition, run the identical request list one
after the other, the one that goes first alternating (A B, B A, ...), so the shared machine's
load weighs on both alike; the report then has ratios (first server / second). More servers
run the same way (in reversed order every other segment); --ratio A/B picks the pairs.

Workload (fixed by --seed; the same for every server): for a concurrency point C and
repetition r, C x --requests-per-client requests (at least --min-requests, at most
--max-requests when given, never fewer than C), each with a prompt
of token ids (drawn uniformly from [--id-lo, --id-hi), so no tokenizer difference matters; the
default range is inside both SmolLM2's 49152 and Llama-3's 128256 vocabularies and above their
special tokens) whose length is drawn from --prompt-lens and a max_tokens drawn from
--output-lens. The ids differ between points and repetitions (so one run's prompts are not
another's cached prefix) but not between servers (a segment run again, below, gets new ids of
the same lengths). With --shared-prefix N every prompt starts
with the same N ids (a system prompt; the --prompt-lens part follows it), for prefix-caching
comparisons: llmhost serve's cache is on by default and off with --no-prefix-caching;
llama-server reuses a slot's previous prompt (its longest common prefix: cache_prompt, on by
default, off with --no-cache-prompt) and keeps a host-memory prompt cache (--cache-ram MiB,
default 8192; 0 turns it off); its --cache-reuse N is a different thing (reusing chunks of at
least N tokens after the common prefix by shifting the KV cache) and is 0 (off) by default.

Requests: POST /v1/completions {"model": the id /v1/models reports, "prompt": [ids],
"max_tokens": n, "temperature": 0, "ignore_eos": true, "stream": true, "stream_options":
{"include_usage": true}} (+ --body NAME=JSON merged in for one server). Exactly C client
threads, each looping: take the next request of the list, send it on a new loopback
connection, read the event stream to `data: [DONE]`. Per request:
  TTFT  time from sending the request to the first chunk whose text is non-empty;
  ITL   the gaps between consecutive chunks with non-empty text (a server that puts several
        tokens in one chunk shows fewer, longer gaps; tokens/chunk is reported);
  TPOT  (end - first token) / (completion_tokens - 1);
  completion tokens from usage.completion_tokens (the chunks with text when usage is absent).
Per point: request throughput = requests / wall time (first send to last end), output tok/s =
completion tokens / wall time. TTFT / ITL percentiles pool every request of the point's
repetitions; the throughputs are medians over repetitions. Before each segment the script
waits (at most --quiet-wait s) until no other task is runnable beyond the cores the servers'
--threads leave free; segments that started busy are marked. During each segment the CPU time
of every server, of this script and of the whole machine is read from /proc: the rest is the
foreign load (other people's builds); a segment in which it exceeded --max-foreign of the
machine is run again (--retries times at most, the least disturbed attempt kept), and the
idle server's CPU time shows whether a server spins while it waits. With Linux autogroups
every session gets an equal CPU share whatever its jobs' nice values, so another session's
`nice 19` job competes at full weight; --autogroup-nice -10 (root) raises the servers' and the
script's sessions alike. On SIGINT / SIGTERM the servers are stopped and what was measured is
printed and written.

Prints progress to stderr and Markdown tables to stdout; --out writes every request's numbers
as JSON. Python 3 standard library only. Every loop is bounded: --startup-timeout for a
server to answer /health, --request-timeout per request (and per socket read), --point-timeout
per segment. Exit status: 0 ok, 1 a server failed (did not start, or requests failed), 2 usage.
"""

from __future__ import annotations

import argparse
import http.client
import ipaddress
import json
import os
import platform
import random
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

API = "/v1/completions"
MAX_EVENT_LINES_SLACK = 64   # SSE lines beyond 2 per token allowed before a stream is cut


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---- servers ---------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_loopback(host: str) -> None:
    if host == "localhost":
        return
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        pass
    raise SystemExit(f"serve_bench.py: {host}: only loopback addresses (127.0.0.0/8, localhost, "
                     "::1) are allowed")


def cpu_seconds(pid: int | None) -> float | None:
    """utime + stime of a process (all its threads), from /proc/PID/stat."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def set_autogroup_nice(pid: int | str, nice: int) -> None:
    """The nice value of the scheduler autogroup (session) of `pid` (Linux
    CONFIG_SCHED_AUTOGROUP): with autogroups, every session gets an equal share of the CPUs
    whatever its processes' own nice values, so another session's `nice -n 19` job takes as
    much as a benchmark. A negative value needs root."""
    try:
        Path(f"/proc/{pid}/autogroup").write_text(f"{nice}\n")
    except OSError as e:
        log(f"autogroup nice {nice} for {pid}: {e} (ignored)")


class Server:
    def __init__(self, name: str, cmd: str | None, url: str | None, body: dict,
                 log_dir: Path, api_key: str | None, autogroup_nice: int | None = None) -> None:
        self.name, self.cmd, self.body, self.api_key = name, cmd, body, api_key
        self.autogroup_nice = autogroup_nice
        self.proc: subprocess.Popen | None = None
        self.log_path: Path | None = None
        self.argv: list[str] | None = None
        self.model_id: str | None = None
        self.models_json: dict | None = None
        if url is not None:
            u = urllib.parse.urlsplit(url)
            if u.scheme != "http" or not u.hostname:
                raise SystemExit(f"serve_bench.py: {url}: need http://HOST:PORT")
            self.host, self.port = u.hostname, u.port or 80
            check_loopback(self.host)
        else:
            self.host, self.port = "127.0.0.1", free_port()
            self.argv = [a.replace("{port}", str(self.port)) for a in shlex.split(cmd)]
            log_dir.mkdir(parents=True, exist_ok=True)
            safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
            self.log_path = log_dir / f"{safe}.log"

    def headers(self) -> dict:
        h = {"Content-Type": "application/json"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
        c = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            c.request("GET", path, headers=self.headers())
            r = c.getresponse()
            return r.status, r.read(1 << 20)
        finally:
            c.close()

    def start(self, startup_timeout: float) -> None:
        if self.argv is not None:
            log(f"[{self.name}] starting: {shlex.join(self.argv)} (log {self.log_path})")
            lf = open(self.log_path, "ab")
            lf.write(f"\n==== serve_bench.py {time.strftime('%F %T')}: "
                     f"{shlex.join(self.argv)}\n".encode())
            lf.flush()
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=lf,
                                         stderr=subprocess.STDOUT, start_new_session=True)
            lf.close()
            if self.autogroup_nice is not None:
                set_autogroup_nice(self.proc.pid, self.autogroup_nice)
        t0 = time.perf_counter()
        last = ""
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"[{self.name}] exited with status {self.proc.returncode} "
                                   f"before /health answered; log tail:\n{self.log_tail()}")
            if time.perf_counter() - t0 > startup_timeout:
                raise RuntimeError(f"[{self.name}] /health did not answer 200 within "
                                   f"{startup_timeout:.0f} s (last: {last}); log tail:\n"
                                   f"{self.log_tail()}")
            try:
                st, body = self.get("/health", timeout=2.0)
                last = f"{st} {body[:100]!r}"
                if st == 200:
                    break
            except (OSError, http.client.HTTPException) as e:
                last = repr(e)
            time.sleep(0.2)
        self.startup_s = time.perf_counter() - t0
        st, body = self.get("/v1/models", timeout=10.0)
        if st != 200:
            raise RuntimeError(f"[{self.name}] GET /v1/models: {st} {body[:300]!r}")
        self.models_json = json.loads(body)
        self.model_id = self.models_json["data"][0]["id"]
        log(f"[{self.name}] ready in {self.startup_s:.1f} s at http://{self.host}:{self.port}, "
            f"model id {self.model_id!r}")

    def log_tail(self, n: int = 25) -> str:
        if self.log_path is None:
            return "(no log: --url)"
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError as e:
            return f"(log unreadable: {e})"

    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is None or self.proc.poll() is None

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM to the server's own process group (it was started in a new session), then
        SIGKILL after `timeout`. Returns the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log(f"[{self.name}] did not exit {timeout:.0f} s after SIGTERM: SIGKILL")
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(10)
        return self.proc.returncode


# ---- workload --------------------------------------------------------------------------------

def parse_list(s: str) -> list[int]:
    try:
        v = [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r}: need comma-separated integers")
    if not v or any(x <= 0 for x in v):
        raise argparse.ArgumentTypeError(f"{s!r}: need positive integers")
    return v


def prefix_ids(args) -> list[int]:
    rng = random.Random(f"serve_bench-{args.seed}-prefix")
    return [rng.randrange(args.id_lo, args.id_hi) for _ in range(args.shared_prefix)]


def workload(args, clients: int, rep: int, attempt: int = 0) -> list[dict]:
    """The request list of one point and repetition: the same for every server. The lengths
    depend on (seed, clients, rep) only; the ids also on the attempt, so a segment that is run
    again does not find its own prompts in a prefix cache."""
    rng = random.Random(f"serve_bench-{args.seed}-c{clients}-r{rep}")
    ids_rng = random.Random(f"serve_bench-{args.seed}-c{clients}-r{rep}-a{attempt}")
    n = max(args.min_requests, clients * args.requests_per_client)
    if args.max_requests:
        n = min(n, max(args.max_requests, clients))
    pre = prefix_ids(args)
    out = []
    for i in range(n):
        plen = rng.choice(args.prompt_lens)
        olen = rng.choice(args.output_lens)
        ids = pre + [ids_rng.randrange(args.id_lo, args.id_hi) for _ in range(plen)]
        out.append({"index": i, "prompt": ids, "max_tokens": olen})
    return out


# ---- one request -----------------------------------------------------------------------------

def one_request(srv: Server, req: dict, timeout: float) -> dict:
    body = {"model": srv.model_id, "prompt": req["prompt"], "max_tokens": req["max_tokens"],
            "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    body.update(srv.body)
    data = json.dumps(body).encode()
    res = {"index": req["index"], "prompt_len": len(req["prompt"]),
           "max_tokens": req["max_tokens"], "ok": False, "error": None, "ttft": None,
           "chunk_t": [], "completion_tokens": None, "prompt_tokens": None,
           "cached_tokens": None, "finish_reason": None, "e2e": None, "text_chars": 0}
    max_lines = 2 * req["max_tokens"] + MAX_EVENT_LINES_SLACK
    conn = http.client.HTTPConnection(srv.host, srv.port, timeout=timeout)
    t0 = time.perf_counter()
    res["t_send"] = t0
    deadline = t0 + timeout
    try:
        conn.request("POST", API, body=data, headers=srv.headers())
        r = conn.getresponse()
        if r.status != 200:
            res["error"] = f"HTTP {r.status}: {r.read(2000).decode(errors='replace')}"
            return res
        done = False
        for _ in range(max_lines * 2):
            if time.perf_counter() > deadline:
                res["error"] = f"stream not finished after {timeout:.0f} s"
                return res
            line = r.readline(1 << 20)
            if not line:
                break
            now = time.perf_counter()
            line = line.strip()
            if not line.startswith(b"data:"):
                continue  # blank separators, comments, event: lines
            payload = line[5:].strip()
            if payload == b"[DONE]":
                done = True
                break
            try:
                ev = json.loads(payload)
            except ValueError:
                res["error"] = f"bad event: {payload[:200]!r}"
                return res
            if "error" in ev:
                res["error"] = f"error event: {json.dumps(ev['error'])[:500]}"
                return res
            for ch in ev.get("choices") or []:
                text = ch.get("text")
                if text:
                    if res["ttft"] is None:
                        res["ttft"] = now - t0
                    res["chunk_t"].append(now - t0)
                    res["text_chars"] += len(text)
                if ch.get("finish_reason"):
                    res["finish_reason"] = ch["finish_reason"]
            u = ev.get("usage")
            if u:
                res["completion_tokens"] = u.get("completion_tokens")
                res["prompt_tokens"] = u.get("prompt_tokens")
                d = u.get("prompt_tokens_details") or {}
                if d.get("cached_tokens") is not None:
                    res["cached_tokens"] = d["cached_tokens"]
            tm = ev.get("timings")  # llama-server: its own count of reused prompt tokens
            if tm and tm.get("cache_n") is not None and res["cached_tokens"] is None:
                res["cached_tokens"] = tm["cache_n"]
        res["e2e"] = time.perf_counter() - t0
        if not done:
            res["error"] = "stream ended without data: [DONE]"
            return res
        if res["completion_tokens"] is None:
            res["completion_tokens"] = len(res["chunk_t"])
            res["usage_missing"] = True
        if res["ttft"] is None:
            res["error"] = "no chunk with text"
            return res
        res["ok"] = True
        return res
    except (OSError, http.client.HTTPException) as e:
        res["error"] = f"{type(e).__name__}: {e}"
        res["e2e"] = time.perf_counter() - t0
        return res
    finally:
        conn.close()


def measured_segment(s: Server, servers: list[Server], reqs: list[dict], clients: int,
                     args) -> dict:
    """run_segment plus the machine's state: whether it started quiet, the CPU time of every
    server (the idle one's shows whether it spins) and of everything else on the machine (the
    foreign load: busy CPU time less the servers' and this process's)."""
    quiet, waited = wait_quiet(args.quiet_wait, args.threads)
    cpu0 = {o.name: cpu_seconds(o.pid()) for o in servers}
    (busy0, nice0), self0 = busy_cpu_seconds(), self_cpu_seconds()
    seg = run_segment(s, reqs, clients, args)
    cpu1 = {o.name: cpu_seconds(o.pid()) for o in servers}
    (busy1, nice1), self1 = busy_cpu_seconds(), self_cpu_seconds()
    cpu = {k: (None if cpu0[k] is None or cpu1[k] is None else cpu1[k] - cpu0[k]) for k in cpu0}
    foreign = share = niced = None
    if busy0 is not None and busy1 is not None and all(v is not None for v in cpu.values()):
        foreign = max(0.0, (busy1 - busy0) - sum(cpu.values()) - (self1 - self0))
        niced = min(foreign, nice1 - nice0)
        share = foreign / (seg["wall_s"] * (os.cpu_count() or 1)) if seg["wall_s"] > 0 else None
    seg.update({"server": s.name, "clients": clients, "quiet": quiet, "waited_s": waited,
                "load1": os.getloadavg()[0], "cpu_s": cpu, "client_cpu_s": self1 - self0,
                "foreign_cpu_s": foreign, "foreign_niced_cpu_s": niced,
                "foreign_share": share})
    idle = {k: v for k, v in cpu.items() if k != s.name}
    log(f"[{s.name}] clients {clients}: {seg['completed']}/{seg['requests']}"
        f" ok in {seg['wall_s']:.1f} s, {num(seg['req_s'], 2)} req/s, "
        f"{num(seg['out_tok_s'])} out tok/s; server CPU {num(cpu[s.name], 1)} s, "
        f"client {num(self1 - self0, 1)} s, foreign {num(foreign, 1)} s"
        + ("" if niced is None else f" ({num(niced, 1)} s niced)")
        + ("" if share is None else f" ({share:.0%})")
        + ("" if quiet else ", started BUSY")
        + (f"; idle server CPU {', '.join(f'{k} {num(v, 2)} s' for k, v in idle.items())}"
           if idle else ""))
    return seg


def run_segment(srv: Server, reqs: list[dict], clients: int, args) -> dict:
    """Exactly `clients` threads, each taking the next request of `reqs` until none is left
    (or the segment's deadline passes: the requests not started then are counted as skipped)."""
    lock = threading.Lock()
    nxt = [0]
    results: list[dict] = []
    t_start = time.perf_counter()
    deadline = t_start + args.point_timeout

    def worker() -> None:
        while True:
            with lock:
                i = nxt[0]
                if i >= len(reqs) or time.perf_counter() > deadline:
                    return
                nxt[0] += 1
            rr = one_request(srv, reqs[i], args.request_timeout)
            with lock:
                results.append(rr)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    join_until = deadline + args.request_timeout + 5
    for t in threads:
        t.join(max(0.0, join_until - time.perf_counter()))
    hung = sum(t.is_alive() for t in threads)
    t_end = time.perf_counter()
    ends = [r["t_send"] + r["e2e"] for r in results if r.get("e2e") is not None]
    wall = (max(ends) if ends else t_end) - t_start
    for r in results:
        r["t_send"] -= t_start
    ok = [r for r in results if r["ok"]]
    ctoks = sum(r["completion_tokens"] or 0 for r in ok)
    return {"results": sorted(results, key=lambda r: r["index"]), "wall_s": wall,
            "requests": len(reqs), "completed": len(ok), "failed": len(results) - len(ok),
            "skipped": len(reqs) - len(results), "hung_threads": hung,
            "completion_tokens": ctoks,
            "prompt_tokens": sum(r["prompt_len"] for r in ok),
            "req_s": len(ok) / wall if wall > 0 else None,
            "out_tok_s": ctoks / wall if wall > 0 else None}


# ---- statistics ------------------------------------------------------------------------------

def pct(v: list[float], p: float) -> float | None:
    """Percentile with linear interpolation between closest ranks (numpy's default)."""
    if not v:
        return None
    s = sorted(v)
    k = (len(s) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summarize(segs: list[dict]) -> dict:
    reqs = [r for s in segs for r in s["results"] if r["ok"]]
    ttft = [r["ttft"] for r in reqs]
    itl = [b - a for r in reqs for a, b in zip(r["chunk_t"], r["chunk_t"][1:])]
    tpot = [(r["e2e"] - r["ttft"]) / (r["completion_tokens"] - 1)
            for r in reqs if (r["completion_tokens"] or 0) > 1]
    e2e = [r["e2e"] for r in reqs]
    chunks = sum(len(r["chunk_t"]) for r in reqs)
    ctoks = sum(r["completion_tokens"] or 0 for r in reqs)
    cached = [r["cached_tokens"] for r in reqs if r["cached_tokens"] is not None]
    short = sum(1 for r in reqs if (r["completion_tokens"] or 0) != r["max_tokens"])
    errors = [r["error"] for s in segs for r in s["results"] if not r["ok"]]
    med = lambda k: statistics.median([s[k] for s in segs if s[k] is not None]) \
        if any(s[k] is not None for s in segs) else None
    return {
        "reps": len(segs), "requests_per_rep": segs[0]["requests"] if segs else 0,
        "requests_ok": len(reqs), "requests_failed": len(errors),
        "requests_skipped": sum(s["skipped"] for s in segs),
        "req_s": med("req_s"), "out_tok_s": med("out_tok_s"),
        "req_s_all": [s["req_s"] for s in segs], "out_tok_s_all": [s["out_tok_s"] for s in segs],
        "ttft_p50": pct(ttft, 50), "ttft_p99": pct(ttft, 99),
        "itl_p50": pct(itl, 50), "itl_p99": pct(itl, 99),
        "tpot_p50": pct(tpot, 50), "e2e_p50": pct(e2e, 50),
        "tokens_per_chunk": ctoks / chunks if chunks else None,
        "cached_tokens_mean": statistics.mean(cached) if cached else None,
        "cached_tokens_reported": len(cached),
        "not_max_tokens": short,
        "usage_missing": sum(1 for r in reqs if r.get("usage_missing")),
        "first_errors": errors[:5],
        "busy_segments": sum(1 for s in segs if not s.get("quiet", True)),
        "foreign_share_max": max((s["foreign_share"] for s in segs
                                  if s.get("foreign_share") is not None), default=None),
    }


# ---- the machine's other load (as tools/bench/llamacpp_side_by_side.py) ------------------------

def running() -> int:
    """Runnable tasks on the machine now, this process excluded."""
    try:
        return max(0, int(Path("/proc/loadavg").read_text().split()[3].split("/")[0]) - 1)
    except (OSError, ValueError, IndexError):
        return 0


def wait_quiet(max_wait: float, threads: int) -> tuple[bool, float]:
    """Wait (at most max_wait s) until, for 1 s, no more other tasks are runnable than the
    cores the servers' threads leave free. Returns (quiet, seconds waited)."""
    allowed = max(0, (os.cpu_count() or 1) - threads)
    t0 = time.perf_counter()
    calm = 0
    while calm < 5:
        if time.perf_counter() - t0 > max_wait:
            return False, time.perf_counter() - t0
        calm = calm + 1 if running() <= allowed else 0
        time.sleep(0.2)
    return True, time.perf_counter() - t0


def busy_cpu_seconds() -> tuple[float, float] | tuple[None, None]:
    """CPU seconds the whole machine spent busy (everything in /proc/stat's cpu line but idle
    and iowait; guest time is already in user), and the part of it in niced (nice > 0)
    processes' user time."""
    try:
        f = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
        hz = os.sysconf("SC_CLK_TCK")
        return (sum(f[:8]) - f[3] - f[4]) / hz, f[1] / hz
    except (OSError, ValueError, IndexError):
        return None, None


def self_cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


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


# ---- report ----------------------------------------------------------------------------------

def ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.1f}"


def num(v: float | None, nd: int = 1) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}"


def report(args, servers: list[Server], summ: dict) -> str:
    lines = []
    pre = f", shared prefix {args.shared_prefix} tokens" if args.shared_prefix else ""
    lines.append(f"Workload: prompts {args.prompt_lens} token ids{pre}, max_tokens "
                 f"{args.output_lens} (ignore_eos, greedy, streamed), "
                 f"{args.requests_per_client} requests per client (at least "
                 f"{args.min_requests}" + (f", at most {args.max_requests}" if args.max_requests
                                          else "") +
                 f"), {args.reps} repetition(s), seed {args.seed}; requests = per repetition.")
    lines.append("")
    lines.append("| clients | requests | server | req/s | out tok/s | TTFT p50 ms | TTFT p99 ms | "
                 "ITL p50 ms | ITL p99 ms | TPOT p50 ms | tok/chunk | cached tok/req | "
                 "ok/failed |")
    lines.append("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    clients = [c for c in args.clients if all(c in summ[s.name] for s in servers)]
    for c in clients:
        for s in servers:
            m = summ[s.name][c]
            lines.append(
                f"| {c} | {m['requests_per_rep']} | {s.name} | {num(m['req_s'], 2)} | {num(m['out_tok_s'])} | "
                f"{ms(m['ttft_p50'])} | {ms(m['ttft_p99'])} | {ms(m['itl_p50'])} | "
                f"{ms(m['itl_p99'])} | {ms(m['tpot_p50'])} | {num(m['tokens_per_chunk'], 2)} | "
                f"{num(m['cached_tokens_mean'], 0)} | {m['requests_ok']}/"
                f"{m['requests_failed'] + m['requests_skipped']} |")
    pairs = []
    for r in args.ratio:
        a, _, b = r.partition("/")
        pairs.append((next(s for s in servers if s.name == a),
                      next(s for s in servers if s.name == b)))
    if not pairs and len(servers) == 2:
        pairs = [tuple(servers)]
    for a, b in pairs:
        lines.append("")
        lines.append(f"Ratios {a.name} / {b.name} (throughput: above 1 = {a.name} faster; "
                     f"latency: below 1 = {a.name} faster):")
        lines.append("")
        lines.append("| clients | req/s | out tok/s | TTFT p50 | TTFT p99 | ITL p50 | ITL p99 | "
                     "TPOT p50 |")
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|")
        for c in clients:
            x, y = summ[a.name][c], summ[b.name][c]
            lines.append(f"| {c} | " + " | ".join(
                ratio(x[k], y[k]) for k in ("req_s", "out_tok_s", "ttft_p50", "ttft_p99",
                                            "itl_p50", "itl_p99", "tpot_p50")) + " |")
    notes = []
    for s in servers:
        for c in clients:
            m = summ[s.name][c]
            if m["requests_failed"] or m["requests_skipped"]:
                notes.append(f"{s.name} at {c} clients: {m['requests_failed']} failed, "
                             f"{m['requests_skipped']} not started; first errors: "
                             f"{m['first_errors'][:2]}")
            if m["not_max_tokens"]:
                notes.append(f"{s.name} at {c} clients: {m['not_max_tokens']} requests did not "
                             "return max_tokens tokens (ignore_eos not honoured?)")
            if m["usage_missing"]:
                notes.append(f"{s.name} at {c} clients: {m['usage_missing']} requests without "
                             "usage (tokens counted as text chunks)")
            if m["busy_segments"]:
                notes.append(f"{s.name} at {c} clients: {m['busy_segments']} segment(s) started "
                             "while other tasks held the cores")
            fs = m["foreign_share_max"]
            if fs is not None and fs > args.max_foreign:
                notes.append(f"{s.name} at {c} clients: other processes used up to {fs:.0%} "
                             "of the CPUs during a kept segment")
    if notes:
        lines.append("")
        lines.extend(f"- {n}" for n in notes)
    return "\n".join(lines)


# ---- main ------------------------------------------------------------------------------------

def report_from_json(path: Path, ratios: list[str]) -> int:
    j = json.loads(path.read_text())
    a = argparse.Namespace(**j["config"])
    if ratios:
        a.ratio = ratios
    names = [s["name"] for s in j["servers"]]
    servers = [argparse.Namespace(name=n) for n in names]
    for r in a.ratio:
        x, _, y = r.partition("/")
        if x not in names or y not in names:
            raise SystemExit(f"serve_bench.py: --ratio {r!r}: names are {names}")
    summ: dict[str, dict[int, dict]] = {n: {} for n in names}
    for c in a.clients:
        for n in names:
            segs = [g for g in j["segments"] if g["server"] == n and g["clients"] == c
                    and g.get("kept")]
            if segs:
                summ[n][c] = summarize(segs)
    print(report(a, servers, summ))
    return 0


def split_named(s: str, default_name: str) -> tuple[str, str]:
    head, sep, rest = s.partition("=")
    if sep and head and " " not in head and "/" not in head and not head.startswith("-"):
        return head, rest
    return default_name, s


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[2:]))
    ap.add_argument("--server", action="append", default=[], metavar="[NAME=]CMD",
                    help="a server command to start ({port} is replaced); repeatable")
    ap.add_argument("--url", action="append", default=[], metavar="[NAME=]URL",
                    help="a running server on the loopback (http://127.0.0.1:PORT)")
    ap.add_argument("--side-by-side", nargs=2, metavar=("CMD_A", "CMD_B"),
                    help="two server commands, run alternately ([NAME=]CMD each)")
    ap.add_argument("--body", action="append", default=[], metavar="NAME=JSON",
                    help="fields merged into every request sent to server NAME")
    ap.add_argument("--ratio", action="append", default=[], metavar="NAME_A/NAME_B",
                    help="print the ratios of server A to server B (repeatable; default with "
                         "two servers: the first to the second)")
    ap.add_argument("--api-key", default=None, help="sent as Authorization: Bearer KEY")
    ap.add_argument("--clients", type=parse_list, default=[1, 8, 32])
    ap.add_argument("--requests-per-client", type=int, default=4)
    ap.add_argument("--min-requests", type=int, default=4)
    ap.add_argument("--max-requests", type=int, default=0,
                    help="at most this many requests per point (but at least one per client)")
    ap.add_argument("--reps", type=int, default=1, help="repetitions of every point")
    ap.add_argument("--prompt-lens", type=parse_list, default=[32, 64, 128, 256, 512])
    ap.add_argument("--output-lens", type=parse_list, default=[32, 64, 128])
    ap.add_argument("--shared-prefix", type=int, default=0, metavar="N",
                    help="every prompt starts with the same N token ids")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--id-lo", type=int, default=256, help="lowest prompt token id")
    ap.add_argument("--id-hi", type=int, default=32000, help="prompt token ids are below this")
    ap.add_argument("--warmup", type=int, default=2, help="warm-up requests per server")
    ap.add_argument("--threads", type=int, default=2,
                    help="threads the servers run (for the quiet-machine wait)")
    ap.add_argument("--quiet-wait", type=float, default=20.0,
                    help="wait at most this long for a quiet machine before each segment")
    ap.add_argument("--max-foreign", type=float, default=0.15,
                    help="a segment during which other processes used more than this share "
                         "of the machine's CPUs is run again (--retries times at most; the "
                         "attempt with the least foreign load is kept)")
    ap.add_argument("--retries", type=int, default=1)
    ap.add_argument("--autogroup-nice", type=int, default=None, metavar="N",
                    help="set the scheduler autogroup nice of each server's session and of "
                         "this script's to N (Linux; e.g. -5 so that other sessions' niced "
                         "jobs yield to the benchmark; negative needs root)")
    ap.add_argument("--startup-timeout", type=float, default=300.0)
    ap.add_argument("--request-timeout", type=float, default=600.0)
    ap.add_argument("--point-timeout", type=float, default=900.0,
                    help="no new request of a segment starts after this many seconds")
    ap.add_argument("--log-dir", type=Path, default=Path("/tmp/serve_bench_logs"))
    ap.add_argument("--out", type=Path, default=None, help="write every sample as JSON")
    ap.add_argument("--report", type=Path, default=None, metavar="FILE.json",
                    help="print the tables of an earlier run's --out JSON (its kept segments) "
                         "and exit; --ratio applies")
    args = ap.parse_args(argv)
    if args.report is not None:
        return report_from_json(args.report, args.ratio)

    specs: list[tuple[str, str | None, str | None]] = []
    for s in args.server:
        n, c = split_named(s, Path(shlex.split(s)[0]).name if s.strip() else "server")
        specs.append((n, c, None))
    for s in args.side_by_side or []:
        n, c = split_named(s, Path(shlex.split(s)[0]).name if s.strip() else "server")
        specs.append((n, c, None))
    for s in args.url:
        n, u = split_named(s, "url")
        specs.append((n, None, u))
    if not specs:
        ap.error("give --server, --side-by-side or --url")
    names = [n for n, _, _ in specs]
    if len(set(names)) != len(names):
        # the same executable twice (e.g. two llmhost configurations): number them
        names = [f"{n}#{i + 1}" for i, n in enumerate(names)]
    bodies: dict[str, dict] = {}
    for b in args.body:
        n, sep, j = b.partition("=")
        if not sep or n not in names:
            ap.error(f"--body {b!r}: need NAME=JSON with NAME one of {names}")
        try:
            bodies[n] = json.loads(j)
        except ValueError as e:
            ap.error(f"--body {b!r}: {e}")
    for r in args.ratio:
        a, sep, b = r.partition("/")
        if not sep or a not in names or b not in names:
            ap.error(f"--ratio {r!r}: need NAME_A/NAME_B with names from {names}")
    if not (0 <= args.id_lo < args.id_hi):
        ap.error("need 0 <= --id-lo < --id-hi")
    if args.requests_per_client < 1 or args.reps < 1 or args.shared_prefix < 0:
        ap.error("--requests-per-client and --reps must be >= 1, --shared-prefix >= 0")

    servers = [Server(n, c, u, bodies.get(n, {}), args.log_dir, args.api_key,
                      args.autogroup_nice)
               for n, (_, c, u) in zip(names, specs)]
    own_nice = None
    if args.autogroup_nice is not None:
        try:
            own_nice = int(Path("/proc/self/autogroup").read_text().split()[-1])
        except (OSError, ValueError, IndexError):
            pass
        set_autogroup_nice("self", args.autogroup_nice)
    started: list[Server] = []
    out = {"argv": sys.argv, "machine": machine(), "date": time.strftime("%F %T"),
           "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
           "servers": [], "segments": []}
    summ: dict[str, dict[int, dict]] = {s.name: {} for s in servers}
    partial: dict[int, dict[str, list[dict]]] = {}
    rc = 0

    def on_term(signum, frame):
        raise KeyboardInterrupt  # stop the servers and write --out on the way out

    signal.signal(signal.SIGTERM, on_term)
    try:
        for s in servers:
            s.start(args.startup_timeout)
            started.append(s)
            out["servers"].append({"name": s.name, "argv": s.argv, "url":
                                   f"http://{s.host}:{s.port}", "model_id": s.model_id,
                                   "models": s.models_json, "startup_s": s.startup_s,
                                   "body": s.body, "log": str(s.log_path)})
        # warm-up: page in the weights, first-call allocations, the shared prefix's cache
        for s in servers:
            pre = prefix_ids(args)
            rng = random.Random(f"serve_bench-{args.seed}-warmup")
            for i in range(args.warmup):
                ids = pre + [rng.randrange(args.id_lo, args.id_hi) for _ in range(32)]
                r = one_request(s, {"index": -1 - i, "prompt": ids, "max_tokens": 8},
                                args.request_timeout)
                if not r["ok"]:
                    raise RuntimeError(f"[{s.name}] warm-up request failed: {r['error']}")
            log(f"[{s.name}] warmed ({args.warmup} requests)")
        seg_no = 0
        for c in args.clients:
            per = {s.name: [] for s in servers}
            partial[c] = per
            for rep in range(args.reps):
                order = servers if (seg_no % 2 == 0) else list(reversed(servers))
                seg_no += 1
                for s in order:
                    if not s.alive():
                        raise RuntimeError(f"[{s.name}] died; log tail:\n{s.log_tail()}")
                    attempts = []
                    for attempt in range(args.retries + 1):
                        reqs = workload(args, c, rep, attempt)
                        seg = measured_segment(s, servers, reqs, c, args)
                        seg.update({"rep": rep, "attempt": attempt, "kept": False})
                        attempts.append(seg)
                        out["segments"].append(seg)
                        fs = seg["foreign_share"]
                        if fs is None or fs <= args.max_foreign or seg["failed"]:
                            break
                        log(f"[{s.name}] foreign load {fs:.0%} > {args.max_foreign:.0%}"
                            + (": running the segment again" if attempt < args.retries else ""))
                    seg = min(attempts, key=lambda x: x["foreign_share"] or 0.0)
                    seg["kept"] = True
                    per[s.name].append(seg)
                    if seg["failed"] or seg["skipped"]:
                        rc = 1
                        bad = [r["error"] for r in seg["results"] if not r["ok"]][:3]
                        log(f"[{s.name}] {seg['failed']} failed, {seg['skipped']} not started:"
                            f" {bad}")
            for s in servers:
                summ[s.name][c] = summarize(per[s.name])
            del partial[c]
        out["summary"] = {n: {str(c): v for c, v in d.items()} for n, d in summ.items()}
        print(report(args, servers, summ))
    except RuntimeError as e:
        log(str(e))
        rc = 1
    except KeyboardInterrupt:
        log("interrupted")
        rc = 1
        # what was measured so far: the points done, and the one under way where every
        # server has at least one segment (marked as partial in the JSON)
        for c, per in partial.items():
            if all(per[s.name] for s in servers):
                for s in servers:
                    summ[s.name][c] = summarize(per[s.name])
                    summ[s.name][c]["partial"] = True
        out["summary"] = {n: {str(c): v for c, v in d.items()} for n, d in summ.items()}
        if any(summ[s.name] for s in servers):
            print(report(args, servers, summ))
            print("\n(interrupted: the tables hold the points measured before that)")
    finally:
        for s in started + [s for s in servers if s not in started]:
            st = s.stop()
            if st is not None:
                log(f"[{s.name}] stopped, exit status {st}")
                for e in out["servers"]:
                    if e["name"] == s.name:
                        e["exit_status"] = st
        if own_nice is not None:
            set_autogroup_nice("self", own_nice)  # the session this script was started in
        if args.out is not None:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(out, indent=1))
            log(f"wrote {args.out}")
    return rc


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""`llmhost serve` end to end: the official OpenAI Python client and raw HTTP against a live
server on the llama-chat-f32 fixture (tiny random-weight Llama with a byte-level BPE
tokenizer.json and a ChatML chat template), checked against `llmhost run` / `llmhost
tokenize`, the fixture's transformers references and the spec of the server; then
schemathesis against docs/openapi.yaml.

Environment (set by tests/meson.build): LH_LLMHOST_EXE, LH_FIXTURES, LH_SOURCE_ROOT.
Every server listens on 127.0.0.1 (port 0) and is killed at the end; every wait is bounded.
Run by tests/scripts/pyenv_unittest.py, which prints `LH-TEST-SUMMARY passed=P failed=F skipped=S`.
"""
import array
import http.client as httpc
import json
import math
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import openai

EXE = os.environ.get("LH_LLMHOST_EXE", "")
HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_ROOT = os.environ.get("LH_SOURCE_ROOT", os.path.dirname(os.path.dirname(HERE)))
FIXTURES = os.environ.get("LH_FIXTURES", os.path.join(SOURCE_ROOT, "tests", "fixtures"))
MODEL = os.path.join(FIXTURES, "models", "llama-chat-f32")
MODEL_ID = "llama-chat-f32"
SPEC = os.path.join(SOURCE_ROOT, "docs", "openapi.yaml")
KEY = "test-key"
HOST = "127.0.0.1"

# Upper bounds only (an ASan -O0 build is several times slower than a normal one); a normal
# run is far below each.
START_TIMEOUT = 120      # until the server prints its listening line
REQ_TIMEOUT = 120        # one HTTP request
CLI_TIMEOUT = 120        # one llmhost run / tokenize
SETTLE_TIMEOUT = 30      # metrics settling after a disconnect
EXIT_TIMEOUT = 60        # a SIGTERM'd server exiting
BODY_LIMIT = 262144      # --max-body-bytes of the shared server

METRIC_GAUGES = ["llmhost_requests_running", "llmhost_requests_waiting",
                 "llmhost_kv_blocks_used", "llmhost_kv_blocks_total"]
METRIC_COUNTERS = ["llmhost_requests_total", "llmhost_requests_finished_total",
                   "llmhost_requests_preempted_total", "llmhost_prompt_tokens_total",
                   "llmhost_generation_tokens_total", "llmhost_prefix_cache_hit_tokens_total",
                   "llmhost_engine_steps_total"]
METRIC_HISTOGRAMS = ["llmhost_time_to_first_token_seconds",
                     "llmhost_inter_token_latency_seconds"]

PROMPT = "The quick brown fox jumps over the lazy dog"


# ---- processes ---------------------------------------------------------------------------

def base_env(**extra):
    """No inherited LLMHOST_* settings but LLMHOST_LOG=warn and LLMHOST_DEVICE; then extra
    (None removes a variable)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMHOST_")}
    env["LLMHOST_LOG"] = "warn"
    if os.environ.get("LLMHOST_DEVICE"):
        env["LLMHOST_DEVICE"] = os.environ["LLMHOST_DEVICE"]
    for k, v in extra.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def cli(*args, timeout=CLI_TIMEOUT):
    p = subprocess.run([EXE, *args], capture_output=True, text=True, timeout=timeout,
                       env=base_env(), stdin=subprocess.DEVNULL)
    if p.returncode != 0:
        raise AssertionError("llmhost %s: exit %d\n%s" % (" ".join(args), p.returncode,
                                                          p.stderr[-3000:]))
    return p.stdout


def tokenize(text, special=True):
    out = cli("tokenize", MODEL, "--text", text, "--json", *([] if special else ["--no-special"]))
    return json.loads(out)["ids"]


def run_text(text, n, *flags, chat=False):
    """`llmhost run MODEL -p TEXT -n N --json [flags]` -> its one output dict (ids, text,
    stopped) with "prefill_tokens" added from the timings."""
    out = json.loads(cli("run", MODEL, "-p", text, "-n", str(n), "--json",
                         *(["--chat"] if chat else []), *flags))
    o = out["outputs"][0]
    o["prefill_tokens"] = out["timings"]["prefill_tokens"]
    return o


def run_ids(ids, n, *flags):
    out = json.loads(cli("run", MODEL, "--prompt-tokens", ",".join(map(str, ids)), "-n", str(n),
                         "--json", *flags))
    return out["tokens"] if "tokens" in out else out


class Server:
    """`llmhost serve MODEL --host 127.0.0.1 --port 0 ARGS`; stdout is drained by a thread,
    stderr goes to a file (its tail is shown on failures)."""

    def __init__(self, *args, env=None, model=MODEL):
        self.tmp = tempfile.mkdtemp(prefix="lh-serve-")
        self.err_path = os.path.join(self.tmp, "stderr.txt")
        self.err = open(self.err_path, "wb")
        self.cmd = [EXE, "serve", model, "--host", HOST, "--port", "0", *args]
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=self.err,
                                     stdin=subprocess.DEVNULL,
                                     env=env if env is not None else base_env())
        self.lines = queue.Queue()
        self.stdout = []
        threading.Thread(target=self._drain, daemon=True).start()
        self.port = None
        deadline = time.monotonic() + START_TIMEOUT
        first = None
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None and self.lines.empty():
                    break
                continue
            if line is None:
                break
            first = line
            break
        if first is None:
            self.kill()
            raise AssertionError("llmhost serve printed no line (exit %s): %s\n%s" % (
                self.proc.returncode, " ".join(self.cmd), self.stderr_tail()))
        m = re.fullmatch(r"llmhost serve: listening on http://([^\s:/]+):(\d+)", first.strip())
        if not m:
            self.kill()
            raise AssertionError("first stdout line %r is not 'llmhost serve: listening on "
                                 "http://HOST:PORT'\n%s" % (first, self.stderr_tail()))
        self.host = m.group(1)
        self.port = int(m.group(2))
        self.base = "http://%s:%d" % (HOST, self.port)

    def _drain(self):
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace")
            self.stdout.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def client(self, key=KEY, timeout=REQ_TIMEOUT):
        return openai.OpenAI(base_url=self.base + "/v1", api_key=key, max_retries=0,
                             timeout=timeout)

    def alive(self):
        return self.proc.poll() is None

    def stderr_tail(self, n=4000):
        try:
            self.err.flush()
            with open(self.err_path, "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    def terminate(self, timeout=EXIT_TIMEOUT):
        """SIGTERM, then the exit status (None: it did not exit in time and was killed)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                return None
        return self.proc.returncode

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        if self.proc.poll() is not None and self.proc.stdout:
            self.proc.stdout.close()
        try:
            self.err.close()
        except OSError:
            pass

    def cleanup(self):
        self.kill()
        shutil.rmtree(self.tmp, True)

    def sanitizer_reports(self, new_only=False):
        """Sanitizer (ASan / UBSan / LSan) reports in the server's stderr (new_only: since the
        last call with new_only)."""
        try:
            self.err.flush()
        except (OSError, ValueError):
            pass
        with open(self.err_path, "rb") as f:
            data = f.read()
        start = getattr(self, "_scanned", 0) if new_only else 0
        if new_only:
            self._scanned = len(data)
        text = data[start:].decode("utf-8", "replace")
        hits = [m.start() for m in re.finditer(
            r"runtime error:|ERROR: AddressSanitizer|ERROR: LeakSanitizer|"
            r"ERROR: ThreadSanitizer|WARNING: ThreadSanitizer", text)]
        return text[hits[0]:hits[0] + 6000] if hits else ""

    def stop_checked(self, new_only=False):
        """SIGTERM; raises unless the server exits 0 with no sanitizer report (new_only: none
        since the last look); cleans up either way."""
        try:
            rc = self.terminate()
            reports = self.sanitizer_reports(new_only=new_only)
            tail = self.stderr_tail()
        finally:
            self.cleanup()
        if reports:
            raise AssertionError("sanitizer report in the server's stderr:\n" + reports)
        if rc != 0:
            raise AssertionError("the server exited %s after SIGTERM (0 expected)\n%s" %
                                 (rc, tail))


# ---- raw HTTP ----------------------------------------------------------------------------

def request(port, method, path, body=None, headers=None, auth=True, timeout=REQ_TIMEOUT):
    """One request on a new connection: (status, {lowercased header: value}, body bytes).
    body: bytes sent as they are, or an object sent as JSON."""
    h = {}
    if auth:
        h["Authorization"] = "Bearer " + KEY
    if body is not None and not isinstance(body, (bytes, bytearray)):
        body = json.dumps(body).encode()
        h["Content-Type"] = "application/json"
    h.update(headers or {})
    c = httpc.HTTPConnection(HOST, port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data
    finally:
        c.close()


def http_json(port, method, path, body=None, **kw):
    status, headers, data = request(port, method, path, body, **kw)
    try:
        obj = json.loads(data)
    except ValueError:
        raise AssertionError("%s %s -> %d, body is not JSON: %r" % (method, path, status,
                                                                     data[:300]))
    return status, headers, obj


def read_sse(resp, limit=100000):
    """Reads a text/event-stream response: (list of parsed data payloads, saw [DONE],
    framing problems)."""
    events, problems, done = [], [], False
    pending = None
    for _ in range(limit):
        line = resp.readline()
        if not line:
            break
        line = line.decode("utf-8")
        if line.endswith("\r\n"):
            line = line[:-2]
        elif line.endswith("\n"):
            line = line[:-1]
        else:
            problems.append("unterminated line %r" % line)
        if line == "":
            if pending is None:
                problems.append("blank line without an event")
                continue
            if pending == "[DONE]":
                done = True
            else:
                events.append(json.loads(pending))
            pending = None
            if done:
                break
            continue
        if line.startswith(":"):
            continue  # comment / keep-alive
        if not line.startswith("data: "):
            problems.append("line %r is not 'data: ...'" % line)
            continue
        if pending is not None:
            problems.append("two data lines in one event")
        pending = line[len("data: "):]
    if pending is not None:
        problems.append("last event %r not followed by a blank line" % pending[:80])
    if done and resp.readline():
        problems.append("data after [DONE]")
    return events, done, problems


def sse(port, path, body, timeout=REQ_TIMEOUT):
    """POSTs a streaming request: (status, headers, events, done, problems)."""
    c = httpc.HTTPConnection(HOST, port, timeout=timeout)
    try:
        c.request("POST", path, body=json.dumps(body).encode(),
                  headers={"Authorization": "Bearer " + KEY,
                           "Content-Type": "application/json"})
        r = c.getresponse()
        headers = {k.lower(): v for k, v in r.getheaders()}
        if r.status != 200:
            return r.status, headers, [json.loads(r.read())], False, []
        events, done, problems = read_sse(r)
        return r.status, headers, events, done, problems
    finally:
        c.close()


def parse_metrics(text):
    """Prometheus text -> ({name: [(labels, value)]}, {name: type})."""
    samples, types = {}, {}
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split()
            if len(parts) >= 4 and parts[1] == "TYPE":
                types[parts[2]] = parts[3]
            continue
        m = re.fullmatch(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)(\s+\d+)?', line)
        if not m:
            raise AssertionError("not a Prometheus sample line: %r" % line)
        labels = {}
        if m.group(2):
            for lm in re.finditer(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(2)):
                labels[lm.group(1)] = lm.group(2)
        v = m.group(3)
        value = {"+Inf": math.inf, "-Inf": -math.inf, "NaN": math.nan}.get(v)
        samples.setdefault(m.group(1), []).append((labels, float(v) if value is None else value))
    return samples, types


def metrics(port):
    status, headers, data = request(port, "GET", "/metrics", auth=False)
    if status != 200:
        raise AssertionError("/metrics -> %d %r" % (status, data[:300]))
    return parse_metrics(data.decode())[0]


def metric(samples, name):
    return samples[name][0][1]


# ---- the fixture's tokenizer (GPT-2 byte-level), for token bytes --------------------------

def _bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def token_bytes_table():
    """{id: bytes of the token} (special tokens: their content, UTF-8) and the special ids."""
    with open(os.path.join(MODEL, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    dec = _bytes_to_unicode()
    table = {i: bytes(dec[ch] for ch in s) for s, i in tok["model"]["vocab"].items()}
    special = set()
    for a in tok["added_tokens"]:
        table[a["id"]] = a["content"].encode()
        if a.get("special"):
            special.add(a["id"])
    return table, special


def decode_ids(ids):
    """The text of ids with special tokens skipped, invalid UTF-8 replaced (as transformers'
    decode(skip_special_tokens=True))."""
    table, special = token_bytes_table()
    return b"".join(table[i] for i in ids if i not in special).decode("utf-8", "replace")


def load_npy(path):
    """A float32 .npy file -> (shape, flat array('f'))."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:6] == b"\x93NUMPY", path
    major = data[6]
    if major == 1:
        hlen = int.from_bytes(data[8:10], "little")
        off = 10
    else:
        hlen = int.from_bytes(data[8:12], "little")
        off = 12
    header = data[off:off + hlen].decode("latin1")
    assert "'<f4'" in header and "'fortran_order': False" in header, header
    shape = tuple(int(x) for x in re.search(r"'shape': \(([^)]*)\)", header).group(1)
                  .split(",") if x.strip())
    a = array.array("f")
    a.frombytes(data[off + hlen:])
    return shape, a


def log_softmax_row(shape, flat, row):
    v = shape[1]
    xs = flat[row * v:(row + 1) * v]
    m = max(xs)
    lse = m + math.log(sum(math.exp(x - m) for x in xs))
    return [x - lse for x in xs]


# ---- the shared server -------------------------------------------------------------------

SERVER = None


def setUpModule():
    global SERVER
    if not EXE or not os.access(EXE, os.X_OK):
        raise AssertionError("LH_LLMHOST_EXE=%r is not the llmhost executable" % EXE)
    if not os.path.isfile(os.path.join(MODEL, "tokenizer.json")):
        raise AssertionError("the fixture %s (tools/gen_fixtures.py) is missing" % MODEL)
    SERVER = Server("--api-key", KEY, "--max-batch-size", "8",
                    "--max-body-bytes", str(BODY_LIMIT))


def tearDownModule():
    global SERVER
    if SERVER is not None:
        srv, SERVER = SERVER, None
        srv.stop_checked(new_only=True)


class ServerTest(unittest.TestCase):
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        cls.srv = SERVER
        cls.port = SERVER.port
        cls.oa = SERVER.client()
        cls.max_model_len = cls.oa.models.list().data[0].max_model_len

    def tearDown(self):
        self.assertTrue(self.srv.alive(), "the server died:\n" + self.srv.stderr_tail())
        self.assertEqual(self.srv.sanitizer_reports(new_only=True), "",
                         "a sanitizer report during this test")

    def complete(self, prompt, **kw):
        kw.setdefault("temperature", 0)
        extra = {k: kw.pop(k) for k in ("ignore_eos", "top_k", "min_p", "repetition_penalty",
                                        "stop_token_ids") if k in kw}
        return self.oa.completions.create(model=MODEL_ID, prompt=prompt, extra_body=extra or None,
                                          **kw)

    def chat(self, messages, **kw):
        kw.setdefault("temperature", 0)
        extra = {k: kw.pop(k) for k in ("ignore_eos", "top_k", "min_p", "repetition_penalty",
                                        "stop_token_ids") if k in kw}
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        return self.oa.chat.completions.create(model=MODEL_ID, messages=messages,
                                               extra_body=extra or None, **kw)

    def stream_text(self, prompt, **kw):
        """A streamed completion through the client: (text, finish_reason, usage, chunks)."""
        chunks = list(self.complete(prompt, stream=True,
                                    stream_options={"include_usage": True}, **kw))
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        fin = [c.choices[0].finish_reason for c in chunks if c.choices]
        return text, fin[-1] if fin else None, chunks[-1].usage, chunks


# ---- endpoints without generation --------------------------------------------------------

class TestEndpoints(ServerTest):

    def test_listening_line_names_the_host(self):
        self.assertEqual(self.srv.host, HOST)

    def test_health(self):
        status, headers, obj = http_json(self.port, "GET", "/health", auth=False)
        self.assertEqual((status, obj), (200, {"status": "ok"}))
        self.assertIn("application/json", headers.get("content-type", ""))

    def test_models(self):
        models = self.oa.models.list().data
        self.assertEqual(len(models), 1)
        m = models[0]
        self.assertEqual((m.id, m.object, m.owned_by), (MODEL_ID, "model", "llmhost"))
        self.assertIsInstance(m.created, int)
        with open(os.path.join(MODEL, "config.json")) as f:
            self.assertEqual(m.max_model_len, json.load(f)["max_position_embeddings"])
        status, _, obj = http_json(self.port, "GET", "/v1/models")
        self.assertEqual(status, 200)
        self.assertEqual(obj["object"], "list")
        self.assertEqual(set(obj["data"][0]), {"id", "object", "created", "owned_by",
                                               "max_model_len"})

    def test_metrics_format(self):
        status, headers, data = request(self.port, "GET", "/metrics", auth=False)
        self.assertEqual(status, 200)
        ctype = headers.get("content-type", "")
        self.assertTrue(ctype.startswith("text/plain") and "version=0.0.4" in ctype, ctype)
        # one request first, so that the histograms have observations
        self.complete(PROMPT, max_tokens=4, ignore_eos=True)
        samples, types = parse_metrics(request(self.port, "GET", "/metrics", auth=False)[2]
                                       .decode())
        for name in METRIC_GAUGES + METRIC_COUNTERS:
            with self.subTest(metric=name):
                self.assertIn(name, samples)
                self.assertEqual(len(samples[name]), 1, samples[name])
                self.assertGreaterEqual(samples[name][0][1], 0)
                if name in types:
                    self.assertEqual(types[name], "gauge" if name in METRIC_GAUGES
                                     else "counter")
        for name in METRIC_HISTOGRAMS:
            with self.subTest(metric=name):
                if name in types:
                    self.assertEqual(types[name], "histogram")
                buckets = samples.get(name + "_bucket", [])
                self.assertTrue(buckets, name + "_bucket missing")
                les = [float(lb["le"]) for lb, _ in buckets]
                self.assertEqual(les, sorted(les))
                self.assertEqual(les[-1], math.inf)
                counts = [v for _, v in buckets]
                self.assertEqual(counts, sorted(counts), "buckets not cumulative")
                self.assertIn(name + "_sum", samples)
                self.assertIn(name + "_count", samples)
                self.assertEqual(counts[-1], metric(samples, name + "_count"))
        self.assertGreater(metric(samples, "llmhost_time_to_first_token_seconds_count"), 0)
        self.assertGreater(metric(samples, "llmhost_kv_blocks_total"), 0)
        self.assertGreaterEqual(metric(samples, "llmhost_requests_total"),
                                metric(samples, "llmhost_requests_finished_total"))

    def test_metrics_and_health_need_no_key_v1_does(self):
        self.assertEqual(request(self.port, "GET", "/metrics", auth=False)[0], 200)
        self.assertEqual(request(self.port, "GET", "/health", auth=False)[0], 200)
        self.assertEqual(request(self.port, "GET", "/v1/models", auth=False)[0], 401)
        with self.assertRaises(openai.AuthenticationError):
            self.srv.client(key="wrong-key").models.list()

    def test_any_content_type(self):
        body = json.dumps({"model": MODEL_ID, "prompt": PROMPT, "max_tokens": 2}).encode()
        for ctype in ("text/plain", "application/x-www-form-urlencoded", None):
            with self.subTest(content_type=ctype):
                status, _, data = request(self.port, "POST", "/v1/completions", body,
                                       headers={"Content-Type": ctype} if ctype else {})
                self.assertEqual(status, 200, data[:300])


# ---- completions ---------------------------------------------------------------------------

class TestCompletions(ServerTest):

    def test_nonstream_shape_and_usage(self):
        r = self.complete(PROMPT, max_tokens=8, ignore_eos=True)
        self.assertRegex(r.id, r"^cmpl-[0-9a-f]+$")
        self.assertEqual((r.object, r.model), ("text_completion", MODEL_ID))
        self.assertIsInstance(r.created, int)
        self.assertEqual(len(r.choices), 1)
        c = r.choices[0]
        self.assertEqual((c.index, c.finish_reason, c.logprobs), (0, "length", None))
        n_prompt = len(tokenize(PROMPT))
        self.assertEqual(r.usage.prompt_tokens, n_prompt)
        self.assertEqual(r.usage.completion_tokens, 8)
        self.assertEqual(r.usage.total_tokens, n_prompt + 8)
        self.assertIsNotNone(r.usage.prompt_tokens_details)
        self.assertGreaterEqual(r.usage.prompt_tokens_details.cached_tokens, 0)

    def test_greedy_equals_llmhost_run_text_prompt(self):
        for text, n in ((PROMPT, 12), ("Hello world", 16), ("a", 8)):
            with self.subTest(prompt=text):
                ref = run_text(text, n, "--ignore-eos", "--temperature", "0")
                r = self.complete(text, max_tokens=n, ignore_eos=True)
                self.assertEqual(r.choices[0].text, ref["text"])
                self.assertEqual(r.usage.completion_tokens, len(ref["ids"]))
                self.assertEqual(r.usage.prompt_tokens, ref["prefill_tokens"])
                self.assertEqual(r.usage.prompt_tokens, len(tokenize(text)))

    def test_token_prompt_equals_llmhost_run_prompt_tokens(self):
        with open(os.path.join(MODEL, "reference.json")) as f:
            ref = json.load(f)
        n = 12
        for i, ids in enumerate(ref["prompts"]):
            with self.subTest(prompt=i):
                tokens = run_ids(ids, n, "--ignore-eos", "--temperature", "0")
                self.assertEqual(tokens, ref["greedy"][i][:n], "llmhost run vs transformers")
                for prompt in (ids, [ids]):
                    r = self.complete(prompt, max_tokens=n, ignore_eos=True, logprobs=1)
                    self.assertEqual(r.usage.prompt_tokens, len(ids))
                    self.assertEqual(r.usage.completion_tokens, n)
                    self.assertEqual(len(r.choices[0].logprobs.tokens), n)
                    self.assertEqual(r.choices[0].text, decode_ids(tokens))
        # a token prompt and its text give the same output
        ids = tokenize(PROMPT)
        a = self.complete(ids, max_tokens=8, ignore_eos=True).choices[0].text
        b = self.complete(PROMPT, max_tokens=8, ignore_eos=True).choices[0].text
        c = self.complete([PROMPT], max_tokens=8, ignore_eos=True).choices[0].text
        self.assertEqual(a, b)
        self.assertEqual(b, c)

    def test_default_sampling_is_llmhost_runs(self):
        # omitted sampling fields: the model's generation defaults, as `llmhost run`
        ref = run_text(PROMPT, 10, "--ignore-eos")
        r = self.oa.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=10, seed=0,
                                       extra_body={"ignore_eos": True})
        self.assertEqual(r.choices[0].text, ref["text"])

    def test_default_max_tokens_is_16(self):
        r = self.oa.completions.create(model=MODEL_ID, prompt=PROMPT, temperature=0,
                                       extra_body={"ignore_eos": True})
        self.assertEqual(r.usage.completion_tokens, 16)
        self.assertEqual(r.choices[0].finish_reason, "length")

    def test_max_tokens_zero(self):
        r = self.complete(PROMPT, max_tokens=0)
        self.assertEqual(r.choices[0].text, "")
        self.assertEqual(r.usage.completion_tokens, 0)

    def test_stream_equals_nonstream(self):
        for text, n in ((PROMPT, 12), ("Hello world", 16)):
            with self.subTest(prompt=text):
                r = self.complete(text, max_tokens=n, ignore_eos=True)
                s_text, fin, usage, chunks = self.stream_text(text, max_tokens=n,
                                                              ignore_eos=True)
                self.assertEqual(s_text, r.choices[0].text)
                self.assertEqual(fin, "length")
                self.assertEqual(usage.prompt_tokens, r.usage.prompt_tokens)
                self.assertEqual(usage.completion_tokens, r.usage.completion_tokens)
                self.assertEqual(usage.total_tokens, r.usage.total_tokens)
                self.assertEqual(chunks[-1].choices, [])
                ids = {c.id for c in chunks}
                self.assertEqual(len(ids), 1)
                self.assertRegex(ids.pop(), r"^cmpl-[0-9a-f]+$")

    def test_stream_wire_format(self):
        body = {"model": MODEL_ID, "prompt": PROMPT, "max_tokens": 8, "temperature": 0,
                "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
        status, headers, events, done, problems = sse(self.port, "/v1/completions", body)
        self.assertEqual(status, 200, events)
        self.assertTrue(headers.get("content-type", "").startswith("text/event-stream"),
                        headers)
        self.assertTrue(done, "no data: [DONE]")
        self.assertEqual(problems, [])
        *choice_events, last = events
        self.assertEqual(last["choices"], [])
        self.assertEqual(last["usage"]["completion_tokens"], 8)
        for i, e in enumerate(choice_events):
            self.assertEqual(e["object"], "text_completion")
            self.assertIn("usage", e)
            self.assertIsNone(e["usage"])
            self.assertEqual(len(e["choices"]), 1)
            ch = e["choices"][0]
            self.assertEqual(ch["index"], 0)
            self.assertIsInstance(ch["text"], str)
            ch["text"].encode("utf-8")  # no lone surrogate: no UTF-8 character split
            self.assertEqual(ch["finish_reason"],
                             "length" if i == len(choice_events) - 1 else None, e)
        # without include_usage: no usage chunk
        body.pop("stream_options")
        status, _, events, done, problems = sse(self.port, "/v1/completions", body)
        self.assertTrue(done)
        self.assertEqual(problems, [])
        self.assertTrue(all(e["choices"] for e in events), events[-1])
        self.assertTrue(all(e.get("usage") is None for e in events))

    def test_stream_logprobs(self):
        r = self.complete(PROMPT, max_tokens=10, ignore_eos=True, logprobs=2)
        chunks = [c for c in self.complete(PROMPT, max_tokens=10, ignore_eos=True, logprobs=2,
                                           stream=True) if c.choices]
        lps = [c.choices[0].logprobs for c in chunks if c.choices[0].logprobs]
        tokens = [t for lp in lps for t in lp.tokens]
        token_lps = [x for lp in lps for x in lp.token_logprobs]
        offsets = [x for lp in lps for x in lp.text_offset]
        want = r.choices[0].logprobs
        self.assertEqual(tokens, want.tokens)
        self.assertEqual(offsets, want.text_offset)
        for a, b in zip(token_lps, want.token_logprobs):
            self.assertAlmostEqual(a, b, delta=1e-6)
        self.assertEqual(len(token_lps), 10)
        # chat: the same tokens and logprobs, streamed and whole
        whole = self.chat("hello", max_tokens=6, ignore_eos=True, logprobs=True, top_logprobs=2)
        parts = [c.choices[0].logprobs.content for c in
                 self.chat("hello", max_tokens=6, ignore_eos=True, logprobs=True,
                           top_logprobs=2, stream=True)
                 if c.choices and c.choices[0].logprobs and c.choices[0].logprobs.content]
        streamed = [t for p in parts for t in p]
        self.assertEqual([t.token for t in streamed],
                         [t.token for t in whole.choices[0].logprobs.content])
        self.assertEqual([len(t.top_logprobs) for t in streamed], [2] * 6)

    def _stop_case(self, prompt, n=16):
        """A greedy output of n tokens and an ASCII stop string whose first occurrence in
        prompt + output lies inside the output, at an offset > 0: (text, stop, offset)."""
        text = self.complete(prompt, max_tokens=n, ignore_eos=True).choices[0].text
        for length in (3, 2):
            for k in range(1, len(text) - length + 1):
                s = text[k:k + length]
                if not re.fullmatch(r"[A-Za-z]+", s):
                    continue
                if text.find(s) != k or s in prompt or (prompt + text).find(s) < len(prompt):
                    continue
                return text, s, k
        return text, None, None

    def test_stop_strings(self):
        found = 0
        for prompt in (PROMPT, "Hello world", "One two three four", "a b c"):
            text, stop, k = self._stop_case(prompt)
            if stop is None:
                continue
            found += 1
            with self.subTest(prompt=prompt, stop=stop):
                r = self.complete(prompt, max_tokens=16, ignore_eos=True, stop=[stop])
                self.assertEqual(r.choices[0].text, text[:k])
                self.assertEqual(r.choices[0].finish_reason, "stop")
                self.assertLessEqual(r.usage.completion_tokens, 16)
                # a string alone, and among others that never occur
                r2 = self.complete(prompt, max_tokens=16, ignore_eos=True, stop=stop)
                self.assertEqual(r2.choices[0].text, text[:k])
                r3 = self.complete(prompt, max_tokens=16, ignore_eos=True,
                                   stop=["\x01never", stop, "\x02nope"])
                self.assertEqual(r3.choices[0].text, text[:k])
                s_text, fin, usage, _ = self.stream_text(prompt, max_tokens=16,
                                                         ignore_eos=True, stop=[stop])
                self.assertEqual(s_text, text[:k], "streamed text differs from non-stream")
                self.assertEqual(fin, "stop")
                self.assertEqual(usage.completion_tokens, r.usage.completion_tokens)
                # the token count equals `llmhost run --stop`'s (which keeps the stop string)
                ref = run_text(prompt, 16, "--ignore-eos", "--temperature", "0", "--stop", stop)
                self.assertEqual(ref["stopped"], "stop_string")
                self.assertEqual(r.usage.completion_tokens, len(ref["ids"]))
                self.assertTrue(ref["text"].startswith(text[:k] + stop), (ref["text"], stop))
        self.assertGreater(found, 0, "no prompt gave an ASCII stop string to test")

    def test_stop_token_ids(self):
        ref = run_text(PROMPT, 12, "--ignore-eos", "--temperature", "0")
        ids = ref["ids"]
        k = next(i for i in range(2, len(ids)) if ids[i] not in ids[:i])
        r = self.complete(PROMPT, max_tokens=12, stop_token_ids=[ids[k]])
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertEqual(r.usage.completion_tokens, k + 1)
        want = run_text(PROMPT, 12, "--temperature", "0", "--stop-token-id", str(ids[k]))
        self.assertEqual(want["ids"], ids[:k + 1])
        self.assertEqual(r.choices[0].text, want["text"])
        s_text, fin, usage, _ = self.stream_text(PROMPT, max_tokens=12, stop_token_ids=[ids[k]])
        self.assertEqual((s_text, fin, usage.completion_tokens),
                         (want["text"], "stop", k + 1))

    def test_logprobs(self):
        n = 8
        r = self.complete(PROMPT, max_tokens=n, ignore_eos=True, logprobs=3)
        lp = r.choices[0].logprobs
        self.assertEqual(len(lp.tokens), n)
        self.assertEqual(len(lp.token_logprobs), n)
        self.assertEqual(len(lp.top_logprobs), n)
        self.assertEqual(len(lp.text_offset), n)
        self.assertEqual(lp.text_offset, sorted(lp.text_offset))
        for i in range(n):
            top = lp.top_logprobs[i]
            self.assertTrue(1 <= len(top) <= 3, top)
            self.assertTrue(all(v <= 1e-6 for v in top.values()), top)
            self.assertLessEqual(sum(math.exp(v) for v in top.values()), 1 + 1e-4)
            # greedy: the chosen token is the most likely one
            self.assertAlmostEqual(lp.token_logprobs[i], max(top.values()), delta=1e-4)
            # most likely first, as OpenAI lists them
            self.assertEqual(list(top.values()), sorted(top.values(), reverse=True), top)
            self.assertIsInstance(lp.tokens[i], str)
        # logprobs 0: the chosen token's logprob only, an empty object per token
        r0 = self.complete(PROMPT, max_tokens=n, ignore_eos=True, logprobs=0)
        lp0 = r0.choices[0].logprobs
        self.assertEqual(len(lp0.token_logprobs), n)
        self.assertEqual([dict(t) for t in lp0.top_logprobs], [{}] * n)
        for a, b in zip(lp0.token_logprobs, lp.token_logprobs):
            self.assertAlmostEqual(a, b, delta=1e-5)
        self.assertEqual(r0.choices[0].text, r.choices[0].text)

    def test_logprobs_are_the_raw_distribution(self):
        # the reference logits of transformers: prompt 0's last position
        with open(os.path.join(MODEL, "reference.json")) as f:
            ids = json.load(f)["prompts"][0]
        shape, flat = load_npy(os.path.join(MODEL, "logits_0.npy"))
        ref = log_softmax_row(shape, flat, len(ids) - 1)
        table, _ = token_bytes_table()
        best = sorted(range(len(ref)), key=lambda i: -ref[i])[:5]
        for temperature in (0, 1.7):
            with self.subTest(temperature=temperature):
                r = self.complete(ids, max_tokens=1, ignore_eos=True, logprobs=5,
                                  temperature=temperature, seed=3)
                top = r.choices[0].logprobs.top_logprobs[0]
                got = sorted(top.values(), reverse=True)
                want = [ref[i] for i in best][:len(got)]
                for g, w in zip(got, want):
                    self.assertAlmostEqual(g, w, delta=2e-3)
                if temperature == 0:
                    self.assertAlmostEqual(r.choices[0].logprobs.token_logprobs[0], ref[best[0]],
                                           delta=2e-3)
        # chat logprobs carry the token bytes: compare with the ids of transformers' greedy
        # continuation of prompt 3 (the chat template on a system + user turn)
        with open(os.path.join(MODEL, "reference.json")) as f:
            refj = json.load(f)
        msgs = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": "hello"}]
        r = self.chat(msgs, max_tokens=8, ignore_eos=True, logprobs=True, top_logprobs=2)
        self.assertEqual(r.usage.prompt_tokens, len(refj["prompts"][3]))
        self.assertEqual(r.choices[0].message.content, decode_ids(refj["greedy"][3][:8]))
        # `bytes` is the token's own bytes (OpenAI: "useful when characters are represented
        # by multiple tokens and their byte representations must be combined"), not the
        # UTF-8 of a lossy decode of the token alone
        content = r.choices[0].logprobs.content
        self.assertEqual([bytes(t.bytes) for t in content],
                         [table[i] for i in refj["greedy"][3][:8]])

    def test_seed_reproducible(self):
        kw = dict(max_tokens=12, ignore_eos=True, temperature=1.0)
        a = self.complete(PROMPT, seed=1234, **kw).choices[0].text
        b = self.complete(PROMPT, seed=1234, **kw).choices[0].text
        self.assertEqual(a, b)
        s_text, _, _, _ = self.stream_text(PROMPT, seed=1234, **kw)
        self.assertEqual(s_text, a)
        others = {self.complete(PROMPT, seed=s, **kw).choices[0].text for s in (1, 2, 3)}
        self.assertTrue(others - {a}, "seeds 1, 2, 3 and 1234 all gave the same text")
        # the request's random stream is fixed: the same tokens as `llmhost run --seed`
        ref = run_text(PROMPT, 12, "--ignore-eos", "--temperature", "1", "--seed", "1234")
        self.assertEqual(a, ref["text"])
        # the biggest seed
        big = self.complete(PROMPT, seed=2 ** 63 - 1, **kw).choices[0].text
        self.assertEqual(big, run_text(PROMPT, 12, "--ignore-eos", "--temperature", "1",
                                       "--seed", str(2 ** 63 - 1))["text"])

    def test_sampling_params_as_llmhost_run(self):
        cases = [
            (dict(temperature=0.8, top_p=0.9), ["--temperature", "0.8", "--top-p", "0.9"]),
            (dict(temperature=1.2, top_k=5), ["--temperature", "1.2", "--top-k", "5"]),
            (dict(temperature=1.0, min_p=0.2), ["--temperature", "1", "--min-p", "0.2"]),
            (dict(temperature=0, repetition_penalty=1.5), ["--temperature", "0",
                                                           "--repetition-penalty", "1.5"]),
        ]
        for params, flags in cases:
            with self.subTest(params=params):
                r = self.complete(PROMPT, max_tokens=10, ignore_eos=True, seed=42, **params)
                ref = run_text(PROMPT, 10, "--ignore-eos", "--seed", "42", *flags)
                self.assertEqual(r.choices[0].text, ref["text"])


# ---- chat ------------------------------------------------------------------------------------

def chatml(messages):
    return "".join("<|im_start|>%s\n%s<|im_end|>\n" % (m["role"], m["content"])
                   for m in messages) + "<|im_start|>assistant\n"


class TestChat(ServerTest):

    def test_nonstream(self):
        r = self.chat("hello there", max_tokens=8, ignore_eos=True)
        self.assertRegex(r.id, r"^chatcmpl-[0-9a-f]+$")
        self.assertEqual((r.object, r.model), ("chat.completion", MODEL_ID))
        c = r.choices[0]
        self.assertEqual((c.index, c.message.role, c.finish_reason, c.logprobs),
                         (0, "assistant", "length", None))
        ref = run_text("hello there", 8, "--ignore-eos", "--temperature", "0", chat=True)
        self.assertEqual(c.message.content, ref["text"])
        n_prompt = len(tokenize(chatml([{"role": "user", "content": "hello there"}]),
                                special=False))
        self.assertEqual(r.usage.prompt_tokens, n_prompt)
        self.assertEqual(r.usage.prompt_tokens, ref["prefill_tokens"])
        self.assertEqual(r.usage.completion_tokens, 8)
        self.assertEqual(r.usage.total_tokens, n_prompt + 8)

    def test_conversation_and_content_parts(self):
        msgs = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"},
                {"role": "user", "content": "more"}]
        r = self.chat(msgs, max_tokens=6, ignore_eos=True)
        self.assertEqual(r.usage.prompt_tokens, len(tokenize(chatml(msgs), special=False)))
        parts = [dict(m, content=[{"type": "text", "text": m["content"]}]) for m in msgs]
        r2 = self.chat(parts, max_tokens=6, ignore_eos=True)
        self.assertEqual(r2.choices[0].message.content, r.choices[0].message.content)
        self.assertEqual(r2.usage.prompt_tokens, r.usage.prompt_tokens)

    def test_max_completion_tokens_wins(self):
        r = self.chat("hello", max_tokens=10, max_completion_tokens=3, ignore_eos=True)
        self.assertEqual(r.usage.completion_tokens, 3)

    def test_default_max_tokens_fills_the_context(self):
        r = self.chat("hi", ignore_eos=True)
        self.assertEqual(r.choices[0].finish_reason, "length")
        self.assertEqual(r.usage.total_tokens, self.max_model_len)

    def test_stream_equals_nonstream(self):
        r = self.chat("hello there", max_tokens=10, ignore_eos=True)
        chunks = list(self.chat("hello there", max_tokens=10, ignore_eos=True, stream=True,
                                stream_options={"include_usage": True}))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        self.assertEqual(text, r.choices[0].message.content)
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, 10)
        self.assertEqual(chunks[-1].usage.prompt_tokens, r.usage.prompt_tokens)
        self.assertTrue(all(c.object == "chat.completion.chunk" for c in chunks))

    def test_stream_wire_format(self):
        body = {"model": MODEL_ID, "messages": [{"role": "user", "content": "hello"}],
                "max_tokens": 6, "temperature": 0, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}}
        status, headers, events, done, problems = sse(self.port, "/v1/chat/completions", body)
        self.assertEqual(status, 200, events)
        self.assertTrue(headers.get("content-type", "").startswith("text/event-stream"))
        self.assertTrue(done)
        self.assertEqual(problems, [])
        *choice_events, usage_event = events
        self.assertEqual(usage_event["choices"], [])
        self.assertEqual(usage_event["usage"]["completion_tokens"], 6)
        self.assertGreaterEqual(len(choice_events), 2)
        first, last = choice_events[0], choice_events[-1]
        self.assertEqual(first["choices"][0]["delta"], {"role": "assistant", "content": ""})
        self.assertEqual(last["choices"][0]["delta"], {})
        self.assertEqual(last["choices"][0]["finish_reason"], "length")
        for e in choice_events:
            self.assertEqual(e["object"], "chat.completion.chunk")
            self.assertRegex(e["id"], r"^chatcmpl-[0-9a-f]+$")
            self.assertIn("usage", e)
            self.assertIsNone(e["usage"])
        for e in choice_events[1:-1]:
            self.assertEqual(set(e["choices"][0]["delta"]), {"content"}, e)
            self.assertIsNone(e["choices"][0]["finish_reason"])

    def test_logprobs(self):
        r = self.chat("hello", max_tokens=6, ignore_eos=True, logprobs=True, top_logprobs=3)
        content = r.choices[0].logprobs.content
        self.assertEqual(len(content), 6)
        for t in content:
            self.assertEqual(len(t.top_logprobs), 3)
            self.assertAlmostEqual(t.logprob, max(x.logprob for x in t.top_logprobs),
                                   delta=1e-4)
            self.assertEqual(t.logprob, t.top_logprobs[0].logprob)
            self.assertTrue(all(0 <= b <= 255 for b in t.bytes))
            lps = [x.logprob for x in t.top_logprobs]
            self.assertEqual(lps, sorted(lps, reverse=True))
        r0 = self.chat("hello", max_tokens=4, ignore_eos=True, logprobs=True)
        self.assertTrue(all(t.top_logprobs == [] for t in r0.choices[0].logprobs.content))
        rn = self.chat("hello", max_tokens=4, ignore_eos=True)
        self.assertIsNone(rn.choices[0].logprobs)

    def test_stop_string(self):
        text = self.chat("hello there", max_tokens=16, ignore_eos=True).choices[0].message.content
        m = re.search(r"(?<=.)[A-Za-z]{2}", text)
        if m is None:
            self.skipTest("no ASCII pair in the chat output %r" % text)
        stop, k = m.group(0), text.find(m.group(0))
        r = self.chat("hello there", max_tokens=16, ignore_eos=True, stop=stop)
        self.assertEqual(r.choices[0].message.content, text[:k])
        self.assertEqual(r.choices[0].finish_reason, "stop")
        chunks = list(self.chat("hello there", max_tokens=16, ignore_eos=True, stop=stop,
                                stream=True))
        self.assertEqual("".join(c.choices[0].delta.content or "" for c in chunks
                                 if c.choices), text[:k])


# ---- concurrency ------------------------------------------------------------------------

class TestConcurrency(ServerTest):

    def test_32_streaming_clients(self):
        prompts = [("Hello world", 8), (PROMPT, 12), ("a", 16), ("One two three", 10),
                   ("The sea is", 14), ("x y z", 9), ("Why?", 11), ("Lorem ipsum dolor", 13)]
        isolated = {}
        for p, n in prompts:
            isolated[p] = self.complete(p, max_tokens=n, ignore_eos=True).choices[0].text
        seeded = self.complete(PROMPT, max_tokens=10, ignore_eos=True, temperature=1.0,
                               seed=99).choices[0].text
        jobs = [("greedy", p, n) for p, n in prompts] * 4
        jobs[::8] = [("seeded", PROMPT, 10)] * len(jobs[::8])
        self.assertEqual(len(jobs), 32)
        results = [None] * len(jobs)
        barrier = threading.Barrier(len(jobs), timeout=60)

        def work(i, kind, p, n):
            try:
                client = self.srv.client()
                kw = dict(temperature=1.0, seed=99) if kind == "seeded" else {}
                barrier.wait()
                stream = client.completions.create(
                    model=MODEL_ID, prompt=p, max_tokens=n, stream=True,
                    temperature=kw.get("temperature", 0), extra_body={"ignore_eos": True},
                    **({"seed": kw["seed"]} if "seed" in kw else {}))
                text = "".join(c.choices[0].text for c in stream if c.choices)
                results[i] = ("ok", text)
            except Exception as e:  # reported below
                results[i] = ("error", repr(e))

        threads = [threading.Thread(target=work, args=(i, *j), daemon=True)
                   for i, j in enumerate(jobs)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 5 * REQ_TIMEOUT
        for t in threads:
            t.join(timeout=max(0.1, deadline - time.monotonic()))
        self.assertFalse(any(t.is_alive() for t in threads), "clients still running")
        for i, (kind, p, n) in enumerate(jobs):
            with self.subTest(client=i, kind=kind, prompt=p):
                self.assertIsNotNone(results[i])
                self.assertEqual(results[i][0], "ok", results[i][1])
                self.assertEqual(results[i][1], seeded if kind == "seeded" else isolated[p])
        # running / waiting are the scheduler's after its last step (llmhost.h), and a client
        # can read its last token before the step that sent it has ended: a bounded wait
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while True:
            m = metrics(self.port)
            if (metric(m, "llmhost_requests_running") == 0 and
                    metric(m, "llmhost_requests_waiting") == 0) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(metric(m, "llmhost_requests_running"), 0)
        self.assertEqual(metric(m, "llmhost_requests_waiting"), 0)


# ---- cancellation ---------------------------------------------------------------------

class TestCancellation(ServerTest):

    def _settled(self, before_finished, submitted_more):
        """Waits (bounded) until every request submitted so far has finished and none runs
        or waits; returns the last metrics."""
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while True:
            m = metrics(self.port)
            done = (metric(m, "llmhost_requests_running") == 0 and
                    metric(m, "llmhost_requests_waiting") == 0 and
                    metric(m, "llmhost_requests_finished_total") >=
                    before_finished + submitted_more and
                    metric(m, "llmhost_requests_finished_total") ==
                    metric(m, "llmhost_requests_total"))
            if done or time.monotonic() > deadline:
                return m, done
            time.sleep(0.05)

    def test_stream_disconnect(self):
        m0 = metrics(self.port)
        n = self.max_model_len - 16
        c = httpc.HTTPConnection(HOST, self.port, timeout=REQ_TIMEOUT)
        c.request("POST", "/v1/completions", body=json.dumps(
            {"model": MODEL_ID, "prompt": "Hi", "max_tokens": n, "temperature": 0,
             "ignore_eos": True, "stream": True}).encode(),
            headers={"Authorization": "Bearer " + KEY, "Content-Type": "application/json"})
        r = c.getresponse()
        self.assertEqual(r.status, 200)
        got = 0
        for _ in range(1000):
            line = r.readline()
            if not line:
                break
            if line.startswith(b"data: "):
                got += 1
                if got == 3:
                    break
        self.assertEqual(got, 3)
        c.sock.shutdown(socket.SHUT_RDWR)
        c.close()
        m, done = self._settled(metric(m0, "llmhost_requests_finished_total"), 1)
        self.assertTrue(done, "after the disconnect: running %s waiting %s finished %s of %s" % (
            metric(m, "llmhost_requests_running"), metric(m, "llmhost_requests_waiting"),
            metric(m, "llmhost_requests_finished_total"), metric(m, "llmhost_requests_total")))
        gen = metric(m, "llmhost_generation_tokens_total") - \
            metric(m0, "llmhost_generation_tokens_total")
        self.assertLess(gen, n, "the whole request was generated: not cancelled")
        sys.stderr.write("[stream disconnect: %d of %d tokens generated] " % (gen, n))
        # docs/serve.md: llmhost_http_disconnects_total counts the cancellations; the request's
        # end counts it after handing the cancel to the scheduler, so the step that ends the
        # request can come first: a bounded wait, as in test_nonstream_disconnect
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while metric(m, "llmhost_http_disconnects_total") == \
                metric(m0, "llmhost_http_disconnects_total") and time.monotonic() < deadline:
            time.sleep(0.02)
            m = metrics(self.port)
        self.assertEqual(metric(m, "llmhost_http_disconnects_total") -
                         metric(m0, "llmhost_http_disconnects_total"), 1)
        self.assertEqual(http_json(self.port, "GET", "/health", auth=False)[2], {"status": "ok"})
        self.assertEqual(self.complete(PROMPT, max_tokens=2).usage.completion_tokens, 2)

    def test_nonstream_disconnect(self):
        m0 = metrics(self.port)
        n = self.max_model_len - 16
        s = socket.create_connection((HOST, self.port), timeout=REQ_TIMEOUT)
        body = json.dumps({"model": MODEL_ID, "prompt": "Hi", "max_tokens": n,
                           "temperature": 0, "ignore_eos": True}).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  b"Authorization: Bearer " + KEY.encode() + b"\r\n"
                  b"Content-Type: application/json\r\nContent-Length: " +
                  str(len(body)).encode() + b"\r\n\r\n" + body)
        # until the server took it (it runs), bounded
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while metric(metrics(self.port), "llmhost_requests_total") == \
                metric(m0, "llmhost_requests_total") and time.monotonic() < deadline:
            time.sleep(0.01)
        s.shutdown(socket.SHUT_RDWR)
        s.close()
        m, done = self._settled(metric(m0, "llmhost_requests_finished_total"), 1)
        self.assertTrue(done, "after the disconnect: running %s finished %s of %s" % (
            metric(m, "llmhost_requests_running"), metric(m, "llmhost_requests_finished_total"),
            metric(m, "llmhost_requests_total")))
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while metric(m, "llmhost_http_disconnects_total") == \
                metric(m0, "llmhost_http_disconnects_total") and time.monotonic() < deadline:
            time.sleep(0.02)
            m = metrics(self.port)
        self.assertEqual(metric(m, "llmhost_http_disconnects_total") -
                         metric(m0, "llmhost_http_disconnects_total"), 1)
        self.assertEqual(request(self.port, "GET", "/health", auth=False)[0], 200)
        self.assertEqual(self.complete(PROMPT, max_tokens=2).usage.completion_tokens, 2)


# ---- prefix caching ------------------------------------------------------------------

class TestPrefixCache(ServerTest):

    def test_shared_prefix(self):
        prefix = ("Zebras graze quietly near the old river while seven herons watch the "
                  "reeds sway in a slow wind, and a distant bell counts the hours of a long "
                  "afternoon over the green and silent valley. ") * 2
        a_text, b_text = prefix + "First question?", prefix + "Second question!"
        m0 = metrics(self.port)
        a = self.complete(a_text, max_tokens=8, ignore_eos=True)
        self.assertEqual(a.usage.prompt_tokens_details.cached_tokens, 0)
        m1 = metrics(self.port)
        b = self.complete(b_text, max_tokens=8, ignore_eos=True)
        m2 = metrics(self.port)
        cached = b.usage.prompt_tokens_details.cached_tokens
        common = 0
        for x, y in zip(tokenize(a_text), tokenize(b_text)):
            if x != y:
                break
            common += 1
        self.assertGreater(cached, 0)
        self.assertLessEqual(cached, common)
        hit = "llmhost_prefix_cache_hit_tokens_total"
        self.assertEqual(metric(m2, hit) - metric(m1, hit), cached)
        self.assertEqual(metric(m1, hit) - metric(m0, hit), 0)
        computed = "llmhost_prompt_tokens_total"
        self.assertEqual(metric(m2, computed) - metric(m1, computed),
                         b.usage.prompt_tokens - cached)
        # the cached prefix changes nothing: the same text as without a cache
        self.assertEqual(b.choices[0].text, run_text(b_text, 8, "--ignore-eos",
                                                     "--temperature", "0")["text"])
        # the same prompt again: cached, identical output
        a2 = self.complete(a_text, max_tokens=8, ignore_eos=True)
        self.assertGreater(a2.usage.prompt_tokens_details.cached_tokens, 0)
        self.assertLess(a2.usage.prompt_tokens_details.cached_tokens, a2.usage.prompt_tokens)
        self.assertEqual(a2.choices[0].text, a.choices[0].text)
        self.assertEqual(a2.usage.prompt_tokens, a.usage.prompt_tokens)
        # streamed usage carries it too
        _, _, usage, _ = self.stream_text(b_text, max_tokens=4, ignore_eos=True)
        self.assertGreater(usage.prompt_tokens_details.cached_tokens, 0)


# ---- errors -----------------------------------------------------------------------------

class TestErrors(ServerTest):

    def err(self, method, path, body=None, status=400, code=None, param="-", auth=True,
            type_=None, headers=None):
        """Sends one request and checks the OpenAI error object; returns it."""
        st, hdrs, data = request(self.port, method, path, body, auth=auth, headers=headers)
        try:
            obj = json.loads(data)
        except ValueError:
            self.fail("%s %s: %d, body not JSON: %r" % (method, path, st, data[:200]))
        self.assertEqual(st, status, obj)
        self.assertIn("application/json", hdrs.get("content-type", ""))
        self.assertEqual(set(obj), {"error"}, obj)
        e = obj["error"]
        self.assertEqual(set(e), {"message", "type", "param", "code"}, e)
        self.assertIsInstance(e["message"], str)
        self.assertTrue(e["message"])
        self.assertEqual(e["type"], type_ or ("server_error" if status >= 500
                                              else "invalid_request_error"), e)
        if code is not None:
            self.assertEqual(e["code"], code, e)
        if param != "-":
            self.assertEqual(e["param"], param, e)
        return e

    def comp(self, **fields):
        body = {"model": MODEL_ID, "prompt": "Hi", "max_tokens": 2}
        body.update(fields)
        return {k: v for k, v in body.items() if v is not Ellipsis}

    def chatb(self, **fields):
        body = {"model": MODEL_ID, "messages": [{"role": "user", "content": "Hi"}],
                "max_tokens": 2}
        body.update(fields)
        return {k: v for k, v in body.items() if v is not Ellipsis}

    def test_malformed_json(self):
        e = self.err("POST", "/v1/completions", b'{"model": "%s",\n "prompt": "x",\n  }' %
                     MODEL_ID.encode(), code="invalid_json")
        self.assertRegex(e["message"].lower(), r"line\D{0,3}3")
        self.assertRegex(e["message"].lower(), r"column\D{0,3}\d+")
        self.err("POST", "/v1/chat/completions", b"{", code="invalid_json")
        self.err("POST", "/v1/completions", b"", status=400)
        self.err("POST", "/v1/completions", b"\xff\xfe{}", code="invalid_json")

    def test_body_not_an_object(self):
        for body in (b"[1, 2]", b'"text"', b"42", b"null"):
            with self.subTest(body=body):
                self.err("POST", "/v1/completions", body, status=400)

    def test_unknown_field(self):
        e = self.err("POST", "/v1/completions", self.comp(max_token=5), code="unknown_field",
                     param="max_token")
        self.assertIn("did you mean 'max_tokens'?", e["message"])
        e = self.err("POST", "/v1/chat/completions", self.chatb(temprature=0.5),
                     code="unknown_field", param="temprature")
        self.assertIn("did you mean 'temperature'?", e["message"])
        e = self.err("POST", "/v1/completions", self.comp(zzqqxx=1), code="unknown_field",
                     param="zzqqxx")
        self.assertNotIn("did you mean", e["message"])
        # completions-only / chat-only fields on the other endpoint
        self.err("POST", "/v1/completions", self.comp(messages=[]), code="unknown_field",
                 param="messages")
        self.err("POST", "/v1/chat/completions", self.chatb(prompt="x"), code="unknown_field",
                 param="prompt")
        self.err("POST", "/v1/completions", self.comp(stream_options={"include_usag": True},
                                                      stream=True), status=400)

    def test_wrong_type(self):
        cases = [("max_tokens", "5"), ("temperature", "hot"), ("stream", "yes"),
                 ("seed", 1.5), ("stop", 5), ("top_k", 2.5), ("ignore_eos", 1),
                 ("stop_token_ids", "1"), ("logprobs", "2"), ("model", 3), ("prompt", 3.5),
                 ("prompt", {"a": 1}), ("user", 5)]
        for field, value in cases:
            with self.subTest(field=field, value=value):
                e = self.err("POST", "/v1/completions", self.comp(**{field: value}),
                             code="invalid_type")
                self.assertIn(e["param"], (None, field))
        for field, value in (("messages", "hi"), ("logprobs", 1), ("top_logprobs", "2")):
            with self.subTest(field=field, value=value):
                self.err("POST", "/v1/chat/completions", self.chatb(**{field: value}),
                         code="invalid_type")
        self.err("POST", "/v1/chat/completions",
                 self.chatb(messages=[{"role": "user", "content": 5}]), code="invalid_type")

    def test_out_of_range(self):
        cases = [("temperature", 2.5), ("temperature", -0.1), ("top_p", 1.5),
                 ("top_k", -2), ("min_p", 1.5), ("min_p", -0.5), ("repetition_penalty", 0),
                 ("repetition_penalty", 10.5), ("max_tokens", -1), ("seed", -1),
                 ("logprobs", 21), ("logprobs", -1),
                 ("stop", ["s"] * 17), ("stop", [""]), ("stop_token_ids", [-1]),
                 ("stop_token_ids", [100000]), ("prompt", [100000]), ("prompt", [-5])]
        for field, value in cases:
            with self.subTest(field=field, value=value):
                self.err("POST", "/v1/completions", self.comp(**{field: value}),
                         code="invalid_value", param=field)
        # an integer beyond 64 bits is refused before any field is read: no param
        self.err("POST", "/v1/completions", self.comp(seed=2 ** 64), code="invalid_value",
                 param=None)
        # top_p 0 is valid: only the most likely token survives (greedy)
        st, _, data = request(self.port, "POST", "/v1/completions",
                              self.comp(top_p=0, max_tokens=2))
        self.assertEqual(st, 200, data[:300])
        for field, value in (("top_logprobs", 21), ("max_completion_tokens", -1)):
            with self.subTest(field=field, value=value):
                self.err("POST", "/v1/chat/completions",
                         self.chatb(logprobs=True, **{field: value}), code="invalid_value",
                         param=field)
        self.err("POST", "/v1/chat/completions", self.chatb(messages=[]), status=400)
        self.err("POST", "/v1/chat/completions",
                 self.chatb(messages=[{"role": "wizard", "content": "x"}]), status=400)
        # top_logprobs needs logprobs true
        self.err("POST", "/v1/chat/completions", self.chatb(top_logprobs=2), status=400)

    def test_unsupported_values(self):
        comp = [("n", 2), ("echo", True), ("best_of", 2), ("frequency_penalty", 0.5),
                ("presence_penalty", -0.5), ("logit_bias", {"5": 10}), ("suffix", "x"),
                ("prompt", ["a", "b"]), ("prompt", [[1, 2], [3]])]
        for field, value in comp:
            with self.subTest(field=field, value=value):
                self.err("POST", "/v1/completions", self.comp(**{field: value}),
                         code="unsupported_value", param=field)
        chat = [("n", 2), ("tools", [{"type": "function", "function": {"name": "f"}}]),
                ("tool_choice", "auto"), ("response_format", {"type": "json_object"}),
                ("frequency_penalty", 1.0), ("logit_bias", {"1": 1})]
        for field, value in chat:
            with self.subTest(field=field, value=value):
                self.err("POST", "/v1/chat/completions", self.chatb(**{field: value}),
                         code="unsupported_value", param=field)
        # a participant name is not passed to the template: refused, not dropped
        self.err("POST", "/v1/chat/completions",
                 self.chatb(messages=[{"role": "user", "content": "hi", "name": "bob"}]),
                 code="unsupported_value", param="messages[0].name")
        # the accepted spellings of the same fields
        ok_comp = dict(n=1, echo=False, best_of=1, frequency_penalty=0, presence_penalty=0.0,
                       logit_bias={}, suffix=None, user="u", stop=None, logprobs=None,
                       max_tokens=None, stream=False)
        st, _, data = request(self.port, "POST", "/v1/completions",
                           self.comp(**dict(ok_comp, max_tokens=2)))
        self.assertEqual(st, 200, data[:300])
        ok_chat = dict(n=1, tools=None, tool_choice=None, response_format={"type": "text"},
                       logit_bias=None, frequency_penalty=0, logprobs=False, user="u")
        st, _, data = request(self.port, "POST", "/v1/chat/completions", self.chatb(**ok_chat))
        self.assertEqual(st, 200, data[:300])

    def test_missing_fields(self):
        self.err("POST", "/v1/completions", self.comp(model=...), code="missing_field",
                 param="model")
        self.err("POST", "/v1/completions", self.comp(prompt=...), code="missing_field",
                 param="prompt")
        self.err("POST", "/v1/chat/completions", self.chatb(messages=...),
                 code="missing_field", param="messages")
        self.err("POST", "/v1/completions", {}, code="missing_field")

    def test_prompt_too_long(self):
        n = self.max_model_len
        e = self.err("POST", "/v1/completions", self.comp(prompt=[5] * (n + 1)),
                     code="context_length_exceeded")
        self.assertIn(str(n), e["message"])
        self.assertIn(str(n + 1), e["message"])
        e = self.err("POST", "/v1/completions", self.comp(prompt=[5] * 10, max_tokens=n),
                     code="context_length_exceeded")
        self.assertIn(str(n), e["message"])
        self.err("POST", "/v1/chat/completions",
                 self.chatb(messages=[{"role": "user", "content": "word " * (2 * n)}]),
                 code="context_length_exceeded")
        # exactly at the limit is fine
        st, _, data = request(self.port, "POST", "/v1/completions",
                           self.comp(prompt=[5] * 10, max_tokens=n - 10, ignore_eos=True))
        self.assertEqual(st, 200, data[:300])
        self.assertEqual(json.loads(data)["usage"]["total_tokens"], n)
        with self.assertRaises(openai.BadRequestError):
            self.oa.completions.create(model=MODEL_ID, prompt=[5] * (n + 1), max_tokens=1)

    def test_unauthorized(self):
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY},
                        {"Authorization": "Basic " + KEY}):
            for method, path, body in (("POST", "/v1/completions", self.comp()),
                                       ("POST", "/v1/chat/completions", self.chatb()),
                                       ("GET", "/v1/models", None)):
                with self.subTest(headers=headers, path=path):
                    self.err(method, path, body, status=401, code="invalid_api_key", param=None,
                             auth=False, headers=headers)
        with self.assertRaises(openai.AuthenticationError):
            self.srv.client(key="nope").completions.create(model=MODEL_ID, prompt="x")

    def test_unknown_model(self):
        self.err("POST", "/v1/completions", self.comp(model="gpt-4"), status=404,
                 code="model_not_found")
        self.err("POST", "/v1/chat/completions", self.chatb(model=MODEL_ID + "x"), status=404,
                 code="model_not_found")
        with self.assertRaises(openai.NotFoundError):
            self.oa.completions.create(model="nope", prompt="x")

    def test_unknown_path(self):
        for method, path in (("GET", "/v1/nope"), ("POST", "/v1/embeddings"), ("GET", "/"),
                             ("GET", "/nope"), ("GET", "/v1/models/extra")):
            with self.subTest(method=method, path=path):
                self.err(method, path, status=404, code="not_found")

    def test_wrong_method(self):
        for method, path in (("GET", "/v1/completions"), ("PUT", "/v1/chat/completions"),
                             ("POST", "/v1/models"), ("DELETE", "/v1/models"),
                             ("POST", "/health"), ("POST", "/metrics")):
            with self.subTest(method=method, path=path):
                self.err(method, path, b"{}" if method in ("POST", "PUT") else None,
                         status=405, code="method_not_allowed")
                # RFC 9110: a 405 names the methods the path takes
                _, hdrs, _ = request(self.port, method, path,
                                     b"{}" if method in ("POST", "PUT") else None)
                self.assertEqual(hdrs.get("allow"),
                                 "POST" if path.endswith("completions") else "GET, HEAD")

    def test_body_too_large(self):
        body = json.dumps(self.comp(prompt="a" * (BODY_LIMIT + 1000))).encode()
        self.err("POST", "/v1/completions", body, status=413, code="request_too_large")
        # without Content-Length (chunked): refused while it streams in
        c = httpc.HTTPConnection(HOST, self.port, timeout=REQ_TIMEOUT)
        try:
            pieces = [body[i:i + 65536] for i in range(0, len(body), 65536)]
            try:
                c.request("POST", "/v1/completions", body=iter(pieces), encode_chunked=True,
                          headers={"Authorization": "Bearer " + KEY,
                                   "Content-Type": "application/json"})
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server may answer and close before the whole body is sent
            r = c.getresponse()
            data = r.read()
            self.assertEqual(r.status, 413, data[:300])
            self.assertEqual(json.loads(data)["error"]["code"], "request_too_large")
        finally:
            c.close()
        self.assertEqual(request(self.port, "GET", "/health", auth=False)[0], 200)
        # just under the limit is parsed (and here refused as too long a prompt)
        body = json.dumps(self.comp(prompt="a " * ((BODY_LIMIT - 200) // 2))).encode()
        self.assertLess(len(body), BODY_LIMIT)
        self.err("POST", "/v1/completions", body, code="context_length_exceeded")


# ---- a server of its own: SIGTERM, the API key from the environment ----------------------

class TestSigterm(unittest.TestCase):

    def setUp(self):
        self.srv = Server("--max-batch-size", "4", env=base_env(LLMHOST_API_KEY="env-key"))
        self.addCleanup(self.srv.cleanup)

    def test_sigterm_finishes_the_stream_and_exits_0(self):
        port = self.srv.port
        self.assertEqual(request(port, "GET", "/v1/models", auth=False)[0], 401)
        self.assertEqual(request(port, "GET", "/v1/models",
                              headers={"Authorization": "Bearer env-key"}, auth=False)[0], 200)
        n = 400
        c = httpc.HTTPConnection(HOST, port, timeout=REQ_TIMEOUT)
        c.request("POST", "/v1/completions", body=json.dumps(
            {"model": MODEL_ID, "prompt": "Hi", "max_tokens": n, "temperature": 0,
             "ignore_eos": True, "stream": True,
             "stream_options": {"include_usage": True}}).encode(),
            headers={"Authorization": "Bearer env-key", "Content-Type": "application/json"})
        r = c.getresponse()
        self.assertEqual(r.status, 200)
        first = r.readline()
        self.assertTrue(first.startswith(b"data: "), first)
        self.assertEqual(r.readline(), b"\n")
        # a second connection, open before the signal (kept alive)
        k = httpc.HTTPConnection(HOST, port, timeout=REQ_TIMEOUT)
        k.request("GET", "/health")
        kr = k.getresponse()
        self.assertEqual((kr.status, json.loads(kr.read())), (200, {"status": "ok"}))
        self.srv.proc.send_signal(signal.SIGTERM)
        try:
            # draining (the stream has most of its 400 tokens to go): /health says so and a
            # new request on the open connection is refused
            deadline = time.monotonic() + SETTLE_TIMEOUT
            while True:
                k.request("GET", "/health")
                kr = k.getresponse()
                health = (kr.status, json.loads(kr.read()))
                if health[0] != 200 or time.monotonic() > deadline:
                    break
                time.sleep(0.005)
            self.assertEqual(health, (503, {"status": "draining"}))
            k.request("POST", "/v1/completions", body=json.dumps(
                {"model": MODEL_ID, "prompt": "x", "max_tokens": 1}).encode(),
                headers={"Authorization": "Bearer env-key"})
            kr = k.getresponse()
            body = json.loads(kr.read())
            self.assertEqual((kr.status, body["error"]["code"], kr.getheader("Retry-After")),
                             (503, "overloaded", "1"), body)
        finally:
            k.close()
        try:
            events, done, problems = read_sse(r)
        finally:
            c.close()
        self.assertTrue(done, "the stream did not end with [DONE]")
        self.assertEqual(problems, [])
        self.assertEqual(events[-1]["usage"]["completion_tokens"], n)
        self.assertEqual(events[-2]["choices"][0]["finish_reason"], "length")
        try:
            rc = self.srv.proc.wait(timeout=EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            rc = "still running %ds after SIGTERM" % EXIT_TIMEOUT
        self.assertEqual(rc, 0, self.srv.stderr_tail())
        self.assertEqual(self.srv.sanitizer_reports(), "")
        with self.assertRaises(OSError):
            socket.create_connection((HOST, port), timeout=5).close()

    def test_sigterm_idle_exits_0(self):
        self.assertEqual(request(self.srv.port, "GET", "/health", auth=False)[0], 200)
        rc = self.srv.terminate()
        self.assertEqual(rc, 0, self.srv.stderr_tail())
        self.assertEqual(self.srv.sanitizer_reports(), "")


class TestServerOptions(unittest.TestCase):
    """--served-model-name, --no-prefix-caching, --timeout, the key from LLMHOST_API_KEY."""

    def setUp(self):
        self.srv = Server("--served-model-name", "my-model", "--no-prefix-caching",
                          "--timeout", "2", env=base_env(LLMHOST_API_KEY="env-key"))
        self.addCleanup(self.srv.stop_checked)
        self.oa = self.srv.client(key="env-key")

    def test_options(self):
        port = self.srv.port
        self.assertEqual(request(port, "GET", "/v1/models", auth=False)[0], 401)
        self.assertEqual(request(port, "GET", "/v1/models", auth=False,
                                 headers={"Authorization": "Bearer " + KEY})[0], 401)
        self.assertEqual([m.id for m in self.oa.models.list().data], ["my-model"])
        with self.assertRaises(openai.NotFoundError):
            self.oa.completions.create(model=MODEL_ID, prompt="x", max_tokens=1)
        text = PROMPT * 4
        a = self.oa.completions.create(model="my-model", prompt=text, max_tokens=4,
                                       temperature=0, extra_body={"ignore_eos": True})
        b = self.oa.completions.create(model="my-model", prompt=text, max_tokens=4,
                                       temperature=0, extra_body={"ignore_eos": True})
        self.assertEqual(a.choices[0].text, b.choices[0].text)
        self.assertEqual(b.usage.prompt_tokens_details.cached_tokens, 0)
        self.assertEqual(metric(metrics(port), "llmhost_prefix_cache_hit_tokens_total"), 0)

    def test_idle_connection_closes(self):
        s = socket.create_connection((HOST, self.srv.port), timeout=30)
        try:
            t0 = time.monotonic()
            try:
                data = s.recv(1)
            except (ConnectionResetError, socket.timeout) as e:
                data = e
            self.assertEqual(data, b"", "an idle connection was not closed: %r" % (data,))
            self.assertLess(time.monotonic() - t0, 20)
        finally:
            s.close()
        self.assertTrue(self.srv.alive())


class TestOverload(unittest.TestCase):
    """--max-requests 1: a second completion while one is in flight is 503 overloaded with
    Retry-After: 1; the server takes requests again once it is done."""

    def setUp(self):
        self.srv = Server("--api-key", KEY, "--max-requests", "1")
        self.addCleanup(self.srv.stop_checked)

    def test_overloaded(self):
        port = self.srv.port
        c = httpc.HTTPConnection(HOST, port, timeout=REQ_TIMEOUT)
        try:
            c.request("POST", "/v1/completions", body=json.dumps(
                {"model": MODEL_ID, "prompt": "Hi", "max_tokens": 480, "temperature": 0,
                 "ignore_eos": True, "stream": True}).encode(),
                headers={"Authorization": "Bearer " + KEY, "Content-Type": "application/json"})
            r = c.getresponse()
            self.assertEqual(r.status, 200)
            self.assertTrue(r.readline().startswith(b"data: "))
            # the first is in flight (480 tokens): the second is refused
            st, headers, obj = http_json(port, "POST", "/v1/completions",
                                         {"model": MODEL_ID, "prompt": "Hi", "max_tokens": 1})
            self.assertEqual(st, 503, obj)
            self.assertEqual(headers.get("retry-after"), "1")
            self.assertEqual((obj["error"]["code"], obj["error"]["type"]),
                             ("overloaded", "server_error"))
            # non-completion endpoints are not limited
            self.assertEqual(request(port, "GET", "/health", auth=False)[0], 200)
            events, done, problems = read_sse(r)
            self.assertTrue(done)
        finally:
            c.close()
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while True:
            st, _, obj = http_json(port, "POST", "/v1/completions",
                                   {"model": MODEL_ID, "prompt": "Hi", "max_tokens": 1})
            if st == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(st, 200, obj)


class TestSmallKvPool(unittest.TestCase):
    """A KV pool of 256 tokens (16 blocks) under 8 slots: concurrent requests that need more
    are preempted and recomputed, and still give their isolated outputs; one request that
    needs more blocks than the whole pool is 400 context_length_exceeded."""

    def setUp(self):
        self.srv = Server("--api-key", KEY, "--max-batch-size", "8",
                          "--set", "kv_cache.max_tokens=256")
        self.addCleanup(self.srv.stop_checked)
        self.oa = self.srv.client()

    def test_preemption_keeps_outputs(self):
        prompts = ["%s %d" % (PROMPT, i) for i in range(8)]
        n = 64
        isolated = [self.oa.completions.create(model=MODEL_ID, prompt=p, max_tokens=n,
                                               temperature=0, extra_body={"ignore_eos": True})
                    .choices[0].text for p in prompts]
        results = [None] * len(prompts)
        barrier = threading.Barrier(len(prompts), timeout=60)

        def work(i):
            try:
                client = self.srv.client()
                barrier.wait()
                stream = client.completions.create(model=MODEL_ID, prompt=prompts[i],
                                                   max_tokens=n, temperature=0, stream=True,
                                                   extra_body={"ignore_eos": True})
                results[i] = "".join(c.choices[0].text for c in stream if c.choices)
            except Exception as e:
                results[i] = e

        threads = [threading.Thread(target=work, args=(i,), daemon=True)
                   for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=5 * REQ_TIMEOUT)
        self.assertFalse(any(t.is_alive() for t in threads))
        self.assertEqual(results, isolated)
        m = metrics(self.srv.port)
        self.assertGreater(metric(m, "llmhost_requests_preempted_total"), 0,
                           "8 x %d tokens in a 256-token pool and no preemption" % n)
        self.assertEqual(metric(m, "llmhost_kv_blocks_total"), 16)

    def test_request_larger_than_the_pool(self):
        st, _, obj = http_json(self.srv.port, "POST", "/v1/completions",
                               {"model": MODEL_ID, "prompt": [5] * 10, "max_tokens": 300})
        self.assertEqual(st, 400, obj)
        self.assertEqual(obj["error"]["code"], "context_length_exceeded")
        self.assertRegex(obj["error"]["message"], r"\d")


# ---- schemathesis against docs/openapi.yaml -------------------------------------------------

class TestSchemathesis(unittest.TestCase):
    """Requests generated from docs/openapi.yaml (schemathesis: positive and negative cases,
    its coverage and fuzzing phases, a bounded number per operation, a fixed seed) against a
    server of its own with a short context (so that no generated request runs long): no 5xx,
    every status, content type and JSON body as documented, every schema-invalid request
    refused; the server alive after. schemathesis_hooks.py puts the served model's id into
    generated bodies."""

    CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance," \
             "response_headers_conformance,response_schema_conformance,negative_data_rejection"
    EXAMPLES = 50

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="lh-schemathesis-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.srv = Server("--api-key", KEY, "--max-batch-size", "4", "--max-seq-len", "64")
        self.addCleanup(self.srv.stop_checked)

    def test_openapi_conformance(self):
        cmd = [sys.executable, "-m", "schemathesis.cli", "run", SPEC,
               "--url", self.srv.base, "-H", "Authorization: Bearer " + KEY,
               "--checks", self.CHECKS, "--max-examples", str(self.EXAMPLES), "--seed", "1",
               "--no-shrink", "--workers", "1", "--request-timeout", "60",
               "--suppress-health-check", "all", "--phases", "examples,coverage,fuzzing",
               "--continue-on-failure", "--max-failures", "50"]
        env = dict(os.environ, NO_COLOR="1", SCHEMATHESIS_TELEMETRY="false",
                   SCHEMATHESIS_HOOKS=os.path.join(HERE, "schemathesis_hooks.py"),
                   LH_SERVED_MODEL_ID=MODEL_ID)
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=self.tmp,
                               env=env, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode("utf-8", "replace") if isinstance(e.stdout, bytes) \
                else (e.stdout or "")
            self.fail("schemathesis ran over 900 s\n%s" % out[-6000:])
        out = p.stdout + p.stderr
        self.assertTrue(self.srv.alive(), "the server died under schemathesis\n" +
                        self.srv.stderr_tail())
        self.assertEqual(request(self.srv.port, "GET", "/health", auth=False)[0], 200)
        self.assertEqual(p.returncode, 0, "schemathesis failed:\n" + out[-12000:])
        m = re.search(r"(\d+) generated, (\d+) passed", out)
        self.assertIsNotNone(m, out[-3000:])
        self.assertGreaterEqual(int(m.group(1)), 200, "too few cases ran:\n" + out[-3000:])
        self.assertEqual(m.group(1), m.group(2), out[-3000:])


if __name__ == "__main__":
    unittest.main(verbosity=2)

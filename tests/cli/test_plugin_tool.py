#!/usr/bin/env python3
"""Integration tests of `llmhost plugin check` and `llmhost plugin index`: every plugin is loaded
in a child process, so a plugin that crashes, exits or hangs is reported (with the phase it was
in) and the caller goes on; every load error class has its exit status; a directory's
arch_index.tsv is compared with what its plugins register, both ways; `plugin index` writes the
exact canonical file atomically and deterministically.

Under ASan the child is a fork of the sanitized llmhost: it resets the fatal-signal handlers
(so a plugin's SIGSEGV stays signal 11, not an ASan report + abort) and ends with _exit (no
leak check of the child's copy), so no ASAN_OPTIONS are needed; the tests assert the exact
signal numbers, which is how that is checked.

Environment (set by tests/meson.build): LH_LLMHOST_EXE, LH_TEST_PLUGINS, LH_BUILTIN_PLUGINS,
LH_SOURCE_ROOT. Prints one line `LH-TEST-SUMMARY passed=P failed=F skipped=S` at the end.
"""
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import unittest

import test_cli  # the CLI helpers (environment, running llmhost) and the suite runner

from test_cli import ABI_MAJOR, ABI_MINOR, HOST_ABI, base_env, tp  # noqa: F401  (base_env: tests that spawn llmhost themselves)

EXE = os.environ.get("LH_LLMHOST_EXE", "")
TEST_PLUGINS = os.environ.get("LH_TEST_PLUGINS", "")
BUILTIN_PLUGINS = os.environ.get("LH_BUILTIN_PLUGINS", "")
SOURCE_ROOT = os.environ.get("LH_SOURCE_ROOT", "")

INDEX_HEADER = "#llmhost-arch-index\t1\n#kind\tname\tshared_object\n"


def cli(*args, timeout=60):
    """Runs llmhost; returns (exit status, stdout, stderr)."""
    return test_cli.cli(*args, timeout=timeout)


def sofile(stem):
    return os.path.basename(tp(stem))


class PluginToolTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="lh-plugin-tool-")
        os.chmod(self.tmp, 0o755)
        self.addCleanup(self.cleanup)

    def cleanup(self):
        for root, dirs, _ in os.walk(self.tmp):
            for d in dirs:
                os.chmod(os.path.join(root, d), 0o755)
        shutil.rmtree(self.tmp, True)

    def plugin_dir(self, name, plugins=(), rows=None, mode=0o755):
        d = os.path.join(self.tmp, name)
        os.makedirs(d)
        os.chmod(d, 0o755)
        for p in plugins:
            dst = os.path.join(d, sofile(p))
            shutil.copyfile(tp(p), dst)
            os.chmod(dst, mode)
        if rows is not None:
            self.write_index(d, rows)
        return d

    def write_index(self, d, rows):
        path = os.path.join(d, "arch_index.tsv")
        with open(path, "w") as f:
            f.write(INDEX_HEADER + "".join("\t".join(r) + "\n" for r in rows))
        os.chmod(path, 0o644)
        return path

    def check_json(self, *args, rc=0, timeout=60):
        code, out, err = cli("plugin", "check", *args, "--json", timeout=timeout)
        self.assertEqual(code, rc, "stdout:\n%s\nstderr:\n%s" % (out, err))
        self.assertGreaterEqual(code, 0, "llmhost itself was killed by a signal")
        return json.loads(out), err

    def one_plugin(self, path, rc, status_name, *args):
        j, err = self.check_json(path, *args, rc=rc)
        self.assertEqual(j["type"], "file")
        self.assertEqual(len(j["plugins"]), 1)
        p = j["plugins"][0]
        self.assertEqual(p["status"], rc)
        self.assertEqual(p["status_name"], status_name)
        self.assertEqual(j["status"], rc)
        self.assertEqual(j["ok"], rc == 0)
        self.assertEqual(p["ok"], rc == 0)
        if rc:
            self.assertEqual(len(j["problems"]), 1)
            self.assertEqual(j["problems"][0]["status"], rc)
            self.assertEqual(j["problems"][0]["message"], p["error"])
            self.assertIn(os.path.basename(path), p["error"])
            self.assertIn("[%s]" % status_name, err)
            self.assertEqual(p["registers"], [])
        return j, p

    # ---- check: good plugins ------------------------------------------------------------

    def test_good_plugin_json(self):
        j, p = self.one_plugin(tp("tp_alpha"), 0, "ok")
        self.assertEqual(j["path"], os.path.realpath(tp("tp_alpha")))
        self.assertEqual(j["host_abi"], HOST_ABI)
        self.assertEqual(j["problems"], [])
        self.assertNotIn("index", j)
        self.assertEqual(p["file"], "libmodel_tp_alpha.so")
        self.assertEqual(p["name"], "model_tp_alpha")
        self.assertEqual(p["version"], "0.0.1")
        self.assertEqual(p["outcome"], "ok")
        self.assertIsNone(p["error"])
        self.assertEqual(p["abi"], {"plugin": HOST_ABI, "major": int(ABI_MAJOR), "minor": int(ABI_MINOR), "host": HOST_ABI,
                                    "compatible": True})
        self.assertEqual(p["security"], {"ok": True, "waived": False, "message": None})
        self.assertEqual(p["registers"], [{"kind": "model", "name": "AlphaForCausalLM"},
                                          {"kind": "model", "name": "SharedForCausalLM"}])

    def test_good_plugin_text(self):
        rc, out, err = cli("plugin", "check", tp("tp_alpha"))
        self.assertEqual(rc, 0, err)
        self.assertIn("libmodel_tp_alpha.so: ok\n", out)
        self.assertIn("  plugin    model_tp_alpha 0.0.1\n", out)
        self.assertIn("  ABI       %s (host %s: compatible)\n" % (HOST_ABI, HOST_ABI), out)
        self.assertIn("  security  ok\n", out)
        self.assertIn("  registers model AlphaForCausalLM\n            model SharedForCausalLM\n",
                      out)
        self.assertIn("result: ok\n", out)
        self.assertEqual(err, "")

    def test_every_kind_is_listed(self):
        _, p = self.one_plugin(tp("tp_target"), 0, "ok")
        self.assertEqual(p["registers"], [
            {"kind": "model", "name": "TargetImpl"},
            {"kind": "model", "name": "EAGLE3LlamaForCausalLM"},
            {"kind": "vision_encoder", "name": "AlphaVisionModel"},
            {"kind": "draft", "name": "eagle3"},
            {"kind": "draft", "name": "mtp"}])
        _, p = self.one_plugin(tp("libattn_tp_backend.so"), 0, "ok")
        self.assertEqual(p["registers"], [{"kind": "attention_backend", "name": "TpPaged"},
                                          {"kind": "attention_backend", "name": "TpFlash"}])
        _, p = self.one_plugin(tp("tp_empty"), 0, "ok")
        self.assertEqual(p["registers"], [])
        rc, out, _ = cli("plugin", "check", tp("tp_empty"))
        self.assertIn("  registers nothing\n", out)

    # ---- check: plugins that take their process down -----------------------------------

    def test_crash_in_init(self):
        j, p = self.one_plugin(tp("tp_crash"), 10, "init-failure")
        self.assertEqual(p["outcome"], "crashed")
        self.assertEqual(p["signal"], signal.SIGSEGV)
        self.assertEqual(p["phase"], "init")
        self.assertIn("crashed with signal 11", p["error"])
        self.assertIn("in init", p["error"])
        # the descriptor was read before init ran
        self.assertEqual(p["name"], "model_tp_crash")
        self.assertTrue(p["abi"]["compatible"])
        rc, out, err = cli("plugin", "check", tp("tp_crash"))
        self.assertEqual(rc, 10)
        # what the plugin wrote to stdout went to stderr (the --json above parsed)
        self.assertNotIn("noise on stdout", out)
        self.assertIn("tp_crash: noise on stdout before crashing", err)
        self.assertIn("libmodel_tp_crash.so: FAILED [init-failure] (crashed)", out)
        self.assertIn("crashed with signal 11 (Segmentation fault) in init", err)

    def test_abort_in_constructor(self):
        _, p = self.one_plugin(tp("tp_ctor_abort"), 6, "load-failure")
        self.assertEqual(p["outcome"], "crashed")
        self.assertEqual(p["signal"], signal.SIGABRT)
        self.assertEqual(p["phase"], "dlopen")
        self.assertIn("crashed with signal 6", p["error"])
        self.assertIn("constructors", p["error"])
        self.assertIsNone(p["abi"])

    def test_exit_in_init(self):
        _, p = self.one_plugin(tp("tp_exit"), 10, "init-failure")
        self.assertEqual(p["outcome"], "exited")
        self.assertEqual(p["exit_status"], 3)
        self.assertIn("exited with status 3 in init", p["error"])

    def test_hang_in_init_is_killed(self):
        t0 = time.monotonic()
        _, p = self.one_plugin(tp("tp_hang"), 10, "init-failure", "--timeout", "1")
        self.assertLess(time.monotonic() - t0, 8)
        self.assertEqual(p["outcome"], "timed_out")
        self.assertIn("did not finish in init within 1 s", p["error"])

    def test_hang_default_timeout_is_10s(self):
        t0 = time.monotonic()
        _, p = self.one_plugin(tp("tp_hang"), 10, "init-failure")
        took = time.monotonic() - t0
        self.assertGreaterEqual(took, 9.5)
        self.assertLess(took, 30)
        self.assertIn("within 10 s", p["error"])

    def test_caller_survives_and_goes_on(self):
        """A dir whose first plugins crash, exit and hang: the later good one is still checked,
        and llmhost ends normally with a complete report."""
        d = self.plugin_dir("mixed", ["tp_crash", "tp_exit", "tp_hang", "tp_alpha"])
        j, _ = self.check_json(d, "--timeout", "1", rc=10)
        by = {p["file"]: p for p in j["plugins"]}
        self.assertEqual(sorted(by), ["libmodel_tp_alpha.so", "libmodel_tp_crash.so",
                                      "libmodel_tp_exit.so", "libmodel_tp_hang.so"])
        self.assertEqual(by["libmodel_tp_crash.so"]["outcome"], "crashed")
        self.assertEqual(by["libmodel_tp_exit.so"]["outcome"], "exited")
        self.assertEqual(by["libmodel_tp_hang.so"]["outcome"], "timed_out")
        self.assertTrue(by["libmodel_tp_alpha.so"]["ok"])
        self.assertEqual(len(j["problems"]), 3)
        # the caller's own process was never signalled (check_json asserts rc >= 0) and left
        # no child behind
        out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout \
            if shutil.which("ps") else ""
        self.assertNotIn(d, out)

    # ---- check: every load error class ---------------------------------------------------

    def test_abi_mismatch_shows_both(self):
        _, p = self.one_plugin(tp("tp_abi_major"), 8, "abi-mismatch")
        self.assertEqual(p["abi"], {"plugin": "1.0", "major": 1, "minor": 0, "host": HOST_ABI,
                                    "compatible": False})
        self.assertIn("ABI 1.0", p["error"])
        self.assertIn("ABI " + HOST_ABI, p["error"])
        rc, out, _ = cli("plugin", "check", tp("tp_abi_major"))
        self.assertIn("  ABI       1.0 (host %s: INCOMPATIBLE)\n" % HOST_ABI, out)
        _, p = self.one_plugin(tp("tp_abi_minor"), 8, "abi-mismatch")
        self.assertEqual(p["abi"]["plugin"], ABI_MAJOR + ".99")
        self.assertFalse(p["abi"]["compatible"])

    def test_not_a_plugin(self):
        _, p = self.one_plugin(tp("tp_noentry"), 7, "not-a-plugin")
        self.assertIn("no entry symbol", p["error"])
        _, p = self.one_plugin(tp("tp_badmagic"), 7, "not-a-plugin")
        self.assertIn("bad magic", p["error"])
        self.assertIsNone(p["abi"])
        # not even an ELF file: dlopen says so (load failure)
        junk = os.path.join(self.tmp, "libmodel_junk.so")
        with open(junk, "w") as f:
            f.write("not an ELF file\n")
        os.chmod(junk, 0o644)
        _, p = self.one_plugin(junk, 6, "load-failure")
        self.assertIn("dlopen failed", p["error"])

    def test_missing_dependency(self):
        d = self.plugin_dir("dep", ["tp_missingdep"])
        _, p = self.one_plugin(os.path.join(d, sofile("tp_missingdep")), 6, "load-failure")
        self.assertIn("tp_absent_dep", p["error"])
        self.assertEqual(p["phase"], "load")  # the loader's dlopen reported it

    def test_undefined_symbol_and_init_failure(self):
        _, p = self.one_plugin(tp("tp_undef"), 6, "load-failure")
        self.assertIn("lh_test_symbol_that_no_library_defines", p["error"])
        _, p = self.one_plugin(tp("tp_initfail"), 10, "init-failure")
        self.assertIn("deliberate init failure", p["error"])
        self.assertEqual(p["outcome"], "error")

    def test_insecure_file(self):
        for mode, word in ((0o775, "group-writable"), (0o757, "world-writable")):
            with self.subTest(mode=oct(mode)):
                d = self.plugin_dir("insecure-%o" % mode, ["tp_alpha"], mode=mode)
                path = os.path.join(d, sofile("tp_alpha"))
                _, p = self.one_plugin(path, 9, "insecure-file")
                self.assertEqual(p["security"]["ok"], False)
                self.assertEqual(p["security"]["waived"], False)
                self.assertIn(word, p["security"]["message"])
                self.assertEqual(p["phase"], "load")  # never dlopened: no descriptor read
                self.assertIsNone(p["name"])
                rc, out, _ = cli("plugin", "check", path)
                self.assertEqual(rc, 9)
                self.assertIn("  security  REFUSED: ", out)
                # the opt-out loads it, and says so
                j, _ = self.check_json(path, "--allow-insecure-plugins", rc=0)
                p = j["plugins"][0]
                self.assertEqual(p["security"]["ok"], False)
                self.assertEqual(p["security"]["waived"], True)
                self.assertIn(word, p["security"]["message"])
                self.assertEqual(len(p["registers"]), 2)
                rc, out, _ = cli("plugin", "check", path, "--allow-insecure-plugins")
                self.assertIn("  security  WAIVED (--allow-insecure-plugins): ", out)

    def test_insecure_dir(self):
        d = self.plugin_dir("opendir", ["tp_alpha"])
        os.chmod(d, 0o777)
        j, _ = self.check_json(d, rc=9)
        self.assertEqual(j["dir_security"]["ok"], False)
        self.assertIn("world-writable", j["dir_security"]["message"])
        self.assertTrue(j["plugins"][0]["ok"])
        j, _ = self.check_json(d, "--allow-insecure-plugins", rc=0)
        self.assertTrue(j["dir_security"]["waived"])

    def test_missing_path_and_usage(self):
        self.assert_rc(cli("plugin", "check", os.path.join(self.tmp, "nope.so")), 5,
                       "module-file-missing")
        self.assert_rc(cli("plugin"), 2, "usage: llmhost plugin")
        self.assert_rc(cli("plugin", "frob", self.tmp), 2, "unknown subcommand 'frob'")
        self.assert_rc(cli("plugin", "check"), 2, "needs a plugin file or directory")
        self.assert_rc(cli("plugin", "index"), 2, "needs a directory")
        self.assert_rc(cli("plugin", "check", self.tmp, "--bogus"), 2, "unknown option")
        self.assert_rc(cli("plugin", "check", self.tmp, "extra", "args"), 2,
                       "unexpected argument")
        for bad in ("0", "-1", "abc", "1e9", ""):
            self.assert_rc(cli("plugin", "check", self.tmp, "--timeout", bad), 2, "--timeout")
        self.assert_rc(cli("plugin", "check", self.tmp, "--timeout"), 2, "--timeout")
        rc, out, _ = cli("plugin", "--help")
        self.assertEqual(rc, 0)
        self.assertIn("llmhost plugin check FILE.so|DIR", out)
        self.assertIn("11 index drift", out)
        rc, out, _ = cli("help")
        self.assertIn("plugin check FILE.so|DIR", out)
        # --json on a path that cannot be checked at all
        rc, out, _ = cli("plugin", "check", os.path.join(self.tmp, "nope"), "--json")
        self.assertEqual(rc, 5)
        self.assertEqual(json.loads(out)["status_name"], "module-file-missing")

    def assert_rc(self, res, rc, needle):
        code, out, err = res
        self.assertEqual(code, rc, "stdout:\n%s\nstderr:\n%s" % (out, err))
        self.assertIn(needle, out + err)

    # ---- check: a directory and its index ------------------------------------------------

    def test_dir_matching_index(self):
        d = self.plugin_dir("good", ["tp_alpha", "libattn_tp_backend.so"], rows=[
            ("model", "AlphaForCausalLM", "libmodel_tp_alpha.so"),
            ("model", "SharedForCausalLM", "libmodel_tp_alpha.so"),
            ("attention_backend", "tpflash", "libattn_tp_backend.so"),
            ("attention_backend", "TpPaged", "libattn_tp_backend.so")])
        j, _ = self.check_json(d, rc=0)
        self.assertEqual(j["type"], "dir")
        self.assertEqual(j["dir_security"]["ok"], True)
        idx = j["index"]
        self.assertTrue(idx["present"])
        for k in ("missing_from_index", "stale", "wrong_file", "missing_files", "unverified"):
            self.assertEqual(idx[k], [], k)
        rc, out, _ = cli("plugin", "check", d)
        self.assertIn("matches the plugins", out)

    def test_dir_without_index(self):
        d = self.plugin_dir("eager", ["tp_alpha"])
        j, _ = self.check_json(d, rc=0)
        self.assertFalse(j["index"]["present"])
        rc, out, _ = cli("plugin", "check", d)
        self.assertIn("none (the directory's plugins load eagerly)", out)

    def test_empty_dir(self):
        d = self.plugin_dir("empty")
        j, _ = self.check_json(d, rc=5)
        self.assertIn("holds no plugin", j["problems"][0]["message"])

    def test_stale_index_both_directions(self):
        d = self.plugin_dir("stale", ["tp_alpha", "tp_extra"], rows=[
            ("model", "AlphaForCausalLM", "libmodel_tp_alpha.so"),
            ("model", "SharedForCausalLM", "libmodel_tp_extra.so"),   # line 4: wrong file
            ("model", "ExtraForCausalLM", "libmodel_tp_extra.so"),
            ("model", "GhostForCausalLM", "libmodel_tp_alpha.so"),    # line 6: nobody
            ("model", "BetaForCausalLM", "libmodel_tp_beta.so")])     # line 7: no such file
        j, err = self.check_json(d, rc=11)
        idx = j["index"]
        self.assertEqual(idx["missing_from_index"], [
            {"kind": "model", "name": "UnpromisedForCausalLM",
             "shared_object": "libmodel_tp_extra.so"}])
        self.assertEqual(idx["wrong_file"], [
            {"kind": "model", "name": "SharedForCausalLM", "shared_object": "libmodel_tp_extra.so",
             "line": 4, "registered_by": "libmodel_tp_alpha.so"}])
        self.assertEqual(idx["stale"], [
            {"kind": "model", "name": "GhostForCausalLM", "shared_object": "libmodel_tp_alpha.so",
             "line": 6}])
        self.assertEqual(idx["missing_files"], [
            {"kind": "model", "name": "BetaForCausalLM", "shared_object": "libmodel_tp_beta.so",
             "line": 7}])
        self.assertEqual([p["status"] for p in j["problems"]], [11, 11, 11, 5])
        msgs = "\n".join(p["message"] for p in j["problems"])
        self.assertIn("lacks model UnpromisedForCausalLM, which libmodel_tp_extra.so registers",
                      msgs)
        self.assertIn("index says model GhostForCausalLM is provided by libmodel_tp_alpha.so, "
                      "libmodel_tp_alpha.so did not register it", msgs)
        self.assertIn("libmodel_tp_beta.so, which is not in", msgs)
        rc, out, err = cli("plugin", "check", d)
        self.assertEqual(rc, 11)
        self.assertIn("DISAGREES with the plugins", out)
        self.assertIn("registered, not in the index: model UnpromisedForCausalLM -> "
                      "libmodel_tp_extra.so\n", out)
        self.assertIn("in the index, not registered: model GhostForCausalLM -> "
                      "libmodel_tp_alpha.so (line 6)\n", out)
        self.assertIn("names a missing file: model BetaForCausalLM -> libmodel_tp_beta.so "
                      "(line 7)\n", out)
        self.assertIn("result: 4 problems (exit 11, index-drift)", out)
        self.assertIn("4 problems", err)

    def test_only_missing_file(self):
        d = self.plugin_dir("gone", ["tp_alpha"], rows=[
            ("model", "AlphaForCausalLM", "libmodel_tp_alpha.so"),
            ("model", "SharedForCausalLM", "libmodel_tp_alpha.so"),
            ("model", "GoneForCausalLM", "libmodel_gone.so")])
        j, _ = self.check_json(d, rc=5)
        self.assertEqual(len(j["index"]["missing_files"]), 1)

    def test_index_names_a_failing_plugin(self):
        """Rows of a plugin that failed are not also reported as drift: its failure is."""
        d = self.plugin_dir("failing", ["tp_alpha", "tp_initfail"], rows=[
            ("model", "AlphaForCausalLM", "libmodel_tp_alpha.so"),
            ("model", "SharedForCausalLM", "libmodel_tp_alpha.so"),
            ("model", "FailForCausalLM", "libmodel_tp_initfail.so")])
        j, _ = self.check_json(d, rc=10)
        self.assertEqual(j["index"]["unverified"][0]["name"], "FailForCausalLM")
        self.assertEqual(j["index"]["stale"], [])
        self.assertEqual(len(j["problems"]), 1)

    def test_index_names_an_unscanned_file(self):
        """A file the index names is checked even if it is not named libmodel_*/libattn_*."""
        d = self.plugin_dir("odd", [])
        shutil.copyfile(tp("tp_alpha"), os.path.join(d, "odd_alpha.so"))
        os.chmod(os.path.join(d, "odd_alpha.so"), 0o755)
        self.write_index(d, [("model", "AlphaForCausalLM", "odd_alpha.so"),
                             ("model", "SharedForCausalLM", "odd_alpha.so")])
        j, _ = self.check_json(d, rc=0)
        self.assertEqual([p["file"] for p in j["plugins"]], ["odd_alpha.so"])

    def test_two_plugins_register_one_name(self):
        d = self.plugin_dir("dup", ["tp_alpha", "tp_beta"])
        j, _ = self.check_json(d, rc=12)
        self.assertIn("SharedForCausalLM' is registered by both libmodel_tp_alpha.so and "
                      "libmodel_tp_beta.so", j["problems"][0]["message"])

    def test_unreadable_index(self):
        d = self.plugin_dir("badidx", ["tp_alpha"])
        with open(os.path.join(d, "arch_index.tsv"), "w") as f:
            f.write("#llmhost-arch-index\t1\nmodel\tonly-two-fields\n")
        j, _ = self.check_json(d, rc=12)
        self.assertIn("arch_index.tsv:2", j["index"]["error"])
        rc, out, _ = cli("plugin", "check", d)
        self.assertIn("UNREADABLE", out)

    def test_builtin_plugin_dir(self):
        j, _ = self.check_json(BUILTIN_PLUGINS, rc=0)
        regs = {(r["kind"], r["name"], p["file"]) for p in j["plugins"] for r in p["registers"]}
        self.assertIn(("model", "LlamaForCausalLM", "libmodel_llama.so"), regs)
        self.assertIn(("attention_backend", "paged", "libattn_paged.so"), regs)
        self.assertTrue(j["index"]["present"])
        for p in j["plugins"]:
            self.assertTrue(p["abi"]["compatible"], p["file"])

    # ---- plugin index ---------------------------------------------------------------------

    EXPECTED = (INDEX_HEADER +
                "model\tAlphaForCausalLM\tlibmodel_tp_alpha.so\n"
                "model\tEAGLE3LlamaForCausalLM\tlibmodel_tp_target.so\n"
                "model\tSharedForCausalLM\tlibmodel_tp_alpha.so\n"
                "model\tTargetImpl\tlibmodel_tp_target.so\n"
                "vision_encoder\tAlphaVisionModel\tlibmodel_tp_target.so\n"
                "draft\teagle3\tlibmodel_tp_target.so\n"
                "draft\tmtp\tlibmodel_tp_target.so\n"
                "attention_backend\tTpFlash\tlibattn_tp_backend.so\n"
                "attention_backend\tTpPaged\tlibattn_tp_backend.so\n")

    def read(self, path):
        with open(path, "rb") as f:
            return f.read()

    def test_index_writes_exact_file(self):
        d = self.plugin_dir("gen", ["tp_alpha", "tp_target", "libattn_tp_backend.so"])
        rc, out, err = cli("plugin", "index", d)
        self.assertEqual(rc, 0, err)
        path = os.path.join(d, "arch_index.tsv")
        self.assertEqual(out, "wrote %s (9 rows)\n" % os.path.realpath(path))
        first = self.read(path)
        self.assertEqual(first.decode(), self.EXPECTED)
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode) & 0o022, 0)
        self.assertTrue(os.stat(path).st_mode & stat.S_IRUSR)
        self.assertEqual(sorted(os.listdir(d)), ["arch_index.tsv", "libattn_tp_backend.so",
                                                 "libmodel_tp_alpha.so", "libmodel_tp_target.so"])
        # re-running gives identical bytes; the written index passes check
        rc, out, err = cli("plugin", "index", d, "--json")
        self.assertEqual(rc, 0, err)
        self.assertEqual(json.loads(out)["rows"], 9)
        self.assertEqual(self.read(path), first)
        self.check_json(d, rc=0)

    def test_index_replaces_a_stale_index(self):
        d = self.plugin_dir("restale", ["tp_alpha"], rows=[
            ("model", "GhostForCausalLM", "libmodel_tp_alpha.so")])
        self.check_json(d, rc=11)
        rc, _, err = cli("plugin", "index", d)
        self.assertEqual(rc, 0, err)
        self.check_json(d, rc=0)

    def test_index_refuses_and_leaves_index_untouched(self):
        cases = [("tp_crash", 10, "crashed with signal 11"),
                 ("tp_initfail", 10, "deliberate init failure"),
                 ("tp_abi_major", 8, "ABI 1.0"),
                 ("tp_noentry", 7, "no entry symbol"),
                 ("tp_beta", 12, "registered by both")]
        for bad, code, needle in cases:
            with self.subTest(plugin=bad):
                d = self.plugin_dir("refuse-" + bad, ["tp_alpha", bad], rows=[
                    ("model", "OldForCausalLM", "libmodel_tp_alpha.so")])
                path = os.path.join(d, "arch_index.tsv")
                before = self.read(path)
                mtime = os.stat(path).st_mtime_ns
                rc, out, err = cli("plugin", "index", d)
                self.assertEqual(rc, code, err)
                self.assertIn(needle, err)
                self.assertIn("not written", err)
                self.assertIn("an existing index is left as it was", err)
                self.assertEqual(self.read(path), before)
                self.assertEqual(os.stat(path).st_mtime_ns, mtime)
                self.assertEqual(sorted(os.listdir(d)),
                                 sorted(["arch_index.tsv", sofile("tp_alpha"), sofile(bad)]))
        # no existing index: none is created either
        d = self.plugin_dir("refuse-new", ["tp_alpha", "tp_hang"])
        rc, out, err = cli("plugin", "index", d, "--timeout", "1", "--json")
        self.assertEqual(rc, 10)
        self.assertIn("did not finish in init within 1 s", json.loads(out)["error"])
        self.assertFalse(os.path.exists(os.path.join(d, "arch_index.tsv")))

    def test_index_insecure(self):
        d = self.plugin_dir("idx-insecure", ["tp_alpha"], mode=0o775)
        rc, _, err = cli("plugin", "index", d)
        self.assertEqual(rc, 9)
        self.assertIn("group-writable", err)
        self.assertFalse(os.path.exists(os.path.join(d, "arch_index.tsv")))
        rc, _, err = cli("plugin", "index", d, "--allow-insecure-plugins")
        self.assertEqual(rc, 0, err)
        self.assertTrue(os.path.exists(os.path.join(d, "arch_index.tsv")))

    def test_index_bad_dirs(self):
        rc, _, err = cli("plugin", "index", os.path.join(self.tmp, "nope"))
        self.assertEqual(rc, 13)
        self.assertIn("nope", err)
        rc, _, err = cli("plugin", "index", tp("tp_alpha"))
        self.assertEqual(rc, 2)
        self.assertIn("is not a directory", err)
        # the rename fails (arch_index.tsv is a directory): I/O error, the temporary file goes
        d = self.plugin_dir("isdir", ["tp_alpha"])
        os.mkdir(os.path.join(d, "arch_index.tsv"))
        rc, _, err = cli("plugin", "index", d)
        self.assertEqual(rc, 13, err)
        self.assertIn("rename of", err)
        self.assertEqual(sorted(os.listdir(d)), ["arch_index.tsv", "libmodel_tp_alpha.so"])
        self.assertTrue(os.path.isdir(os.path.join(d, "arch_index.tsv")))

    def test_index_unwritable_dir(self):
        """The temporary file cannot be created (skipped as root, who may write anyway)."""
        d = self.plugin_dir("ro", ["tp_alpha"])
        os.chmod(d, 0o555)
        if os.access(d, os.W_OK):
            self.skipTest("running as a user who can write a 0555 dir")
        rc, _, err = cli("plugin", "index", d)
        self.assertEqual(rc, 13)
        self.assertIn("temporary file", err)

    def test_index_of_builtin_plugins_is_the_committed_file(self):
        """`plugin index` and the build's generator (gen_arch_index) are one implementation:
        both reproduce the committed arch_index.tsv byte for byte."""
        d = self.plugin_dir("builtin")
        for f in sorted(os.listdir(BUILTIN_PLUGINS)):
            if f.endswith(".so"):
                shutil.copyfile(os.path.join(BUILTIN_PLUGINS, f), os.path.join(d, f))
                os.chmod(os.path.join(d, f), 0o755)
        rc, _, err = cli("plugin", "index", d)
        self.assertEqual(rc, 0, err)
        committed = self.read(os.path.join(SOURCE_ROOT, "arch_index.tsv"))
        self.assertEqual(self.read(os.path.join(d, "arch_index.tsv")), committed)
        gen = os.path.join(os.path.dirname(os.path.abspath(BUILTIN_PLUGINS)), "tools",
                           "gen_arch_index")
        if not os.access(gen, os.X_OK):
            self.skipTest("gen_arch_index not built")
        out_file = os.path.join(self.tmp, "gen.tsv")
        p = subprocess.run([gen, d, "--write", out_file], capture_output=True, text=True,
                           env=base_env(), timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(self.read(out_file), committed)
        # and its --check reports a crashing plugin instead of dying with it
        shutil.copyfile(tp("tp_crash"), os.path.join(d, sofile("tp_crash")))
        p = subprocess.run([gen, d, "--check", out_file], capture_output=True, text=True,
                           env=base_env(), timeout=60)
        self.assertEqual(p.returncode, 10, p.stderr)
        self.assertIn("crashed with signal 11", p.stderr)


def main():
    return test_cli.run_suite("test_plugin_tool.py", __name__,
                              (("LH_LLMHOST_EXE", EXE), ("LH_TEST_PLUGINS", TEST_PLUGINS),
                               ("LH_BUILTIN_PLUGINS", BUILTIN_PLUGINS),
                               ("LH_SOURCE_ROOT", SOURCE_ROOT)))


if __name__ == "__main__":
    sys.exit(main())

"""Shared by the check_*.py test scripts: counting named checks into the LH-TEST-SUMMARY line
that tools/test_summary.py adds up, and paths inside a DESTDIR install."""
import json
import os
import subprocess


class Checker:
    def __init__(self):
        self.passed = self.failed = self.skipped = 0

    def check(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            print("ok   %s" % name)
        else:
            self.failed += 1
            print("FAIL %s%s" % (name, ": " + detail if detail else ""))
        return ok

    def skip(self, name, why):
        self.skipped += 1
        print("skip %s: %s" % (name, why))

    def summary(self):
        print("LH-TEST-SUMMARY passed=%d failed=%d skipped=%d"
              % (self.passed, self.failed, self.skipped))
        return 1 if self.failed or not self.passed else 0


def under(root, path):
    """root/path for an absolute or relative install path."""
    return os.path.join(root, path.lstrip("/"))


def install_dirs(c, meson, builddir):
    """The build's install layout from `meson introspect --buildoptions`: a dict with prefix and
    absolute libdir, bindir, includedir, whether the .pc files are relocatable and b_sanitize;
    None (a
    failed check) when meson cannot tell."""
    p = subprocess.run([meson, "introspect", "--buildoptions", builddir],
                       capture_output=True, text=True, timeout=120)
    if not c.check("meson introspect --buildoptions", p.returncode == 0, p.stderr.strip()):
        return None
    opts = {o["name"]: o["value"] for o in json.loads(p.stdout)}
    d = {"prefix": opts["prefix"],
         "relocatable": opts.get("pkgconfig.relocatable") is True,
         "b_sanitize": opts.get("b_sanitize", "none")}
    for k in ("libdir", "bindir", "includedir"):
        d[k] = opts[k] if os.path.isabs(opts[k]) else os.path.join(opts["prefix"], opts[k])
    return d


def clean_env():
    """The environment without LLMHOST_* settings and without library or pkg-config search
    paths that could find the build tree instead of the install."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith("LLMHOST_") and k not in ("LD_LIBRARY_PATH", "PKG_CONFIG_PATH",
                                                         "PKG_CONFIG_LIBDIR",
                                                         "PKG_CONFIG_SYSROOT_DIR")}


def stage_install(c, meson, builddir, dest):
    """`meson install` of the build into dest/root (DESTDIR); returns that root, or None (a
    failed check)."""
    root = os.path.join(dest, "root")
    p = subprocess.run([meson, "install", "-C", builddir, "--no-rebuild", "--quiet"],
                       capture_output=True, text=True, env=dict(clean_env(), DESTDIR=root),
                       timeout=240)
    if not c.check("meson install --destdir", p.returncode == 0,
                   "exit %d\n%s%s" % (p.returncode, p.stdout, p.stderr)):
        return None
    return root

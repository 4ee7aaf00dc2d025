"""Shared by the check_*.py test scripts: counting named checks into the LH-TEST-SUMMARY line
that tools/test_summary.py adds up, and paths inside a DESTDIR install."""
import os


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

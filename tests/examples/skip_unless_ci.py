"""Skips that must not pass silently in CI (tests/skip_unless_ci.h's Python twin).

A test that needs a reference tool (matplotlib, a user to drop privileges to) skips on a
developer's machine without it, but fails where the environment variable CI is set: the test
command installs every reference there (scripts/setup.sh), so a skip would hide a broken setup.
"""
import os
import subprocess
import sys


def in_ci():
    return os.environ.get("CI", "") not in ("", "0", "false")


def skip_unless_ci(test, reason):
    """test.skipTest(reason), or test.fail(reason) under CI."""
    if in_ci():
        test.fail(f"{reason} (CI is set: scripts/setup.sh provides it)")
    test.skipTest(reason)


def python_with_matplotlib(test):
    """A Python that imports matplotlib (this one, or Debian's /usr/bin/python3), for the plotting
    scripts; without one, skip_unless_ci."""
    exe = next((e for e in (sys.executable, "/usr/bin/python3") if os.path.exists(e) and subprocess.run(
        [e, "-c", "import matplotlib"], capture_output=True).returncode == 0), None)
    if exe is None:
        skip_unless_ci(test, "no python with matplotlib (scripts/setup.sh installs python3-matplotlib)")
    return exe

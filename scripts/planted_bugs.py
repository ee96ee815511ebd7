#!/usr/bin/env python3
"""Text edits for scripts/planted_bugs.sh.

  planted_bugs.py sync SRC DST        copy SRC's files (NUL-separated paths on stdin) into DST
  planted_bugs.py plant FILE OLD NEW  replace OLD (which must occur exactly once) by NEW; print its line
"""
import os
import sys


def sync(src, dst):
    # Writes only files whose bytes differ, so they alone get a new mtime and the build stays
    # incremental; deletes files the source no longer has (CMake globs the test folders).
    want = {p for p in sys.stdin.read().split("\0") if p and os.path.isfile(os.path.join(src, p))}
    for rel in sorted(want):
        with open(os.path.join(src, rel), "rb") as f:
            data = f.read()
        out = os.path.join(dst, rel)
        try:
            with open(out, "rb") as f:
                if f.read() == data:
                    continue
        except FileNotFoundError:
            os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "wb") as f:
            f.write(data)
        os.chmod(out, os.stat(os.path.join(src, rel)).st_mode & 0o777)
    for root, _, files in os.walk(dst):
        for name in files:
            rel = os.path.relpath(os.path.join(root, name), dst)
            if rel not in want:
                os.remove(os.path.join(root, name))


def plant(path, old, new):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    count = text.count(old)
    if count != 1:
        sys.exit(f"planted_bugs: {path}: the original text occurs {count} times (must be exactly once): {old}")
    at = text.index(old)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text[:at] + new + text[at + len(old):])
    print(text.count("\n", 0, at) + 1)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "sync":
        sync(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 5 and sys.argv[1] == "plant":
        plant(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(__doc__)

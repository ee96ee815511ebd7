#!/usr/bin/env python3
"""The docs' pointers into the code resolve: every `[Note: NAME]` that README.md or docs/ cite is
written in the source, in the file the text names next to it ("[Note: NAME] in `path`"), and every
repository path the docs quote in backticks exists. A note moved to another file, or a file
renamed, used to leave the docs pointing at nothing.

    python3 docs_references_test.py REPO_ROOT
"""
import glob
import os
import re
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
TOP = ("core", "autograd", "nn", "optim", "dist", "kernels", "examples", "tests", "io", "data", "bench", "scripts",
       "cmake", "docs")
SOURCE_EXT = (".h", ".cpp", ".cu", ".cuh", ".py", ".sh", ".cmake", ".txt")


def flat(text):
    """Text with comment markers and line breaks folded, so a note wrapped over lines reads whole."""
    return re.sub(r"\s+", " ", re.sub(r"\n\s*(//|#)\s?", "\n", text))


def main():
    docs = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))
    sources = {}
    for top in TOP:
        for path in glob.glob(os.path.join(ROOT, top, "**", "*"), recursive=True):
            if path.endswith(SOURCE_EXT) and os.path.isfile(path):
                with open(path, errors="replace") as f:
                    sources[os.path.relpath(path, ROOT)] = flat(f.read())
    everywhere = " ".join(sources.values())
    failures = []
    cited = 0
    for doc in docs:
        with open(doc) as f:
            text = flat(f.read())
        name = os.path.relpath(doc, ROOT)
        for m in re.finditer(r"\[Note: ([^\]]+)\](?: in `([^`]+)`)?", text):
            note, where = m[1], m[2]
            cited += 1
            tag = f"[Note: {note}]"
            if where and where.split(":")[0] in sources:
                if tag not in sources[where.split(":")[0]]:
                    failures.append(f"{name}: {tag} is not in {where}")
            elif tag not in everywhere:
                failures.append(f"{name}: {tag} is written nowhere in the source")
        for m in re.finditer(r"`((?:%s)/[A-Za-z0-9_./-]+)`" % "|".join(TOP), text):
            path = m[1].rstrip(".")
            # A program is quoted by its name (`bench/train_step_bench`): its source counts.
            if not any(os.path.exists(os.path.join(ROOT, path + ext)) for ext in ("", ".cpp")):
                failures.append(f"{name}: `{path}` does not exist")
    for f in failures:
        print("FAIL", f)
    print(f"docs_references_test: {cited} note citations and the quoted paths checked, {len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""docs/walkthrough.md prints what the program prints (ctest: walkthrough_doc_np4).

Runs examples/zero_walkthrough as the page says (N = 4, its default model), in f32 and in bf16,
and requires every byte-count row the page quotes from tables [1] (memory per rank) and [2]
(bytes per collective) to be a line of one of those two printouts, character for character up to
spacing. Times vary from run to run and are not checked; bytes do not, so a page whose tables
drift from the code fails here.

    python3 walkthrough_doc_test.py --exe build/examples/zero_walkthrough --doc docs/walkthrough.md \
        --mpiexec mpiexec
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

# The rows of tables [1] and [2], and their summary lines.
ROW = re.compile(r"^(DDP|ZeRO-[123])?\s*(param|grad|optim|activation|comm|total)\s+[\d,]+\s"
                 r"|(all_reduce|reduce_scatter|all_gather) / \w+\s+\d+\s+[\d,]+"
                 r"|model bytes on the wire|model states vs DDP")


def normalized(line):
    return " ".join(line.split())


def quoted_rows(doc):
    rows = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", doc, re.S):
        rows += [normalized(l) for l in block.splitlines() if ROW.search(l.strip())]
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--exe", required=True)
    ap.add_argument("--doc", required=True)
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--preflags", default="")
    a = ap.parse_args()
    rows = quoted_rows(open(a.doc).read())
    # A page without quoted rows, or a pattern that stopped matching them, must not pass.
    if len(rows) < 20:
        print(f"FAIL: only {len(rows)} table rows found in {a.doc}")
        return 1
    printed = set()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as out:
        for dtype in ("f32", "bf16"):
            cmd = [a.mpiexec, *a.preflags.split(), "-n", "4", a.exe, "--dtype", dtype, "--cap-mib", "0",
                   "--no-checkpoint-compare", "--out", out]
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
            if p.returncode != 0:
                print(f"FAIL: {' '.join(cmd)} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
                return 1
            printed |= {normalized(l) for l in p.stdout.splitlines()}
    missing = [r for r in rows if r not in printed]
    for r in missing:
        print(f"FAIL: {a.doc} quotes a row the program does not print: {r}")
    print(f"{len(rows) - len(missing)} of {len(rows)} quoted rows printed by the f32 and bf16 runs at N = 4")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""docs/walkthrough.md prints what the program prints (ctest: walkthrough_doc_np4).

Runs examples/zero_walkthrough as the page says (N = 4, its default model), in f32 and in bf16,
and requires every byte-count row the page quotes from tables [1] (memory per rank) and [2]
(bytes per collective) to be a line of one of those two printouts, character for character up to
spacing. Times vary from run to run and are not checked; bytes do not, so a page whose tables
drift from the code fails here. With --predict-exe, also at N = 8 (f32): zero_predict's
prediction of the page's model equals the measured ledgers at N = 4 and 8, as
zero_walkthrough_test.py checks it at N = 1 and 2 on a smaller model.

    python3 walkthrough_doc_test.py --exe build/examples/zero_walkthrough --doc docs/walkthrough.md \
        --mpiexec mpiexec [--predict-exe build/examples/zero_predict]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zero_walkthrough_test as wt  # noqa: E402  (check_prediction, read, failures)

# The page's model: zero_walkthrough's defaults.
PAGE_MODEL = ["--n-layer", "4", "--n-head", "4", "--n-embd", "128", "--seq", "64", "--vocab", "256"]

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
    ap.add_argument("--predict-exe")
    a = ap.parse_args()
    rows = quoted_rows(open(a.doc).read())
    # A page without quoted rows, or a pattern that stopped matching them, must not pass.
    if len(rows) < 20:
        print(f"FAIL: only {len(rows)} table rows found in {a.doc}")
        return 1
    printed = set()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    runs = [("f32", 4), ("bf16", 4)] + ([("f32", 8)] if a.predict_exe else [])
    with tempfile.TemporaryDirectory() as out:
        for dtype, n in runs:
            run_out = os.path.join(out, f"{dtype}_n{n}")
            os.makedirs(run_out)
            cmd = [a.mpiexec, *a.preflags.split(), "-n", str(n), a.exe, "--dtype", dtype, "--cap-mib", "0",
                   "--no-checkpoint-compare", "--out", run_out]
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
            if p.returncode != 0:
                print(f"FAIL: {' '.join(cmd)} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
                return 1
            if n == 4:
                printed |= {normalized(l) for l in p.stdout.splitlines()}
            if a.predict_exe and dtype == "f32":
                wt.check_prediction(a.predict_exe, n, run_out, wt.read(os.path.join(run_out, f"memory_n{n}.csv")),
                                    wt.read(os.path.join(run_out, f"traffic_n{n}.csv")), PAGE_MODEL)
    for f in wt.failures:
        print("FAIL:", f)
    missing = [r for r in rows if r not in printed]
    for r in missing:
        print(f"FAIL: {a.doc} quotes a row the program does not print: {r}")
    print(f"{len(rows) - len(missing)} of {len(rows)} quoted rows printed by the f32 and bf16 runs at N = 4"
          + (f"; zero_predict against the ledgers at N = 4, 8: {len(wt.failures)} failure(s)" if a.predict_exe else ""))
    return 1 if missing or wt.failures else 0


if __name__ == "__main__":
    sys.exit(main())

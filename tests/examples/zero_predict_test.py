#!/usr/bin/env python3
"""zero_predict on GPT-2 XL (1.5B) against the ZeRO paper's formulas, worked out here by hand.

Per rank after a step, with Psi parameters, N ranks, s bytes per parameter and per gradient and
K bytes of optimizer state per parameter (f32: s = 4, K = 8; mixed precision: s = 2, K = 12):
DDP (2s + K) Psi; ZeRO-1 2s Psi + K Psi / N; ZeRO-2 s Psi + (s + K) Psi / N; ZeRO-3
(2s + K) Psi / N. zero_predict counts each unit padded to a multiple of N (as the partitioner
pads it): the test pads the same way, and checks the padding is below N elements a unit. The
walkthrough test checks the same predictions against measured ledgers on a small model.

    python3 zero_predict_test.py build/examples/zero_predict
"""
import csv
import os
import subprocess
import sys
import tempfile

L, C, V, T = 48, 1600, 50257, 1024  # GPT-2 XL
BLOCK = 12 * C * C + 13 * C          # qkv, proj, fc, fc-proj weights and biases; two LayerNorms
ROOT = V * C + T * C + 2 * C         # wte (tied with the LM head), wpe, ln_f
PSI = L * BLOCK + ROOT
failures = []


def expect(cond, msg):
    if not cond:
        failures.append(msg)


def pad(n, N):
    return (n + N - 1) // N * N


def paper(stage, s, k, psi, N):
    """{category: bytes per rank} of the paper's formulas."""
    shard = {"ddp": (), "zero1": ("optim",), "zero2": ("optim", "grad"), "zero3": ("optim", "grad", "param")}[stage]
    return {cat: per * psi // (N if cat in shard else 1) for cat, per in (("param", s), ("grad", s), ("optim", k))}


def main():
    exe = sys.argv[1]
    expect(PSI == 1_557_611_200, f"GPT-2 XL has {PSI} parameters by this count")
    with tempfile.TemporaryDirectory() as out:
        for dtype, s, k in (("f32", 4, 8), ("bf16", 2, 12)):
            res = subprocess.run([exe, "--model", "gpt2-xl", "--ranks", "1,64,1024", "--dtype", dtype, "--out", out],
                                 capture_output=True, text=True, timeout=60)
            expect(res.returncode == 0, f"{dtype}: exit {res.returncode}: {res.stderr}")
            limit = f"(2s+K)/(2s) = {(2 * s + k) // (2 * s)}x (ZeRO-1), (2s+K)/s = {(2 * s + k) // s}x (ZeRO-2)"
            expect(limit in res.stdout, f"{dtype}: the limits as N grows, {limit!r}, not printed")
            for N in (1, 64, 1024):
                P = L * pad(BLOCK, N) + pad(ROOT, N)
                expect(0 <= P - PSI < (L + 1) * N, f"N={N}: padding {P - PSI}")
                with open(os.path.join(out, f"predict_memory_n{N}.csv"), newline="") as f:
                    rows = {(r["stage"], r["category"]): int(r["after"]) for r in csv.DictReader(f)}
                for stage in ("ddp", "zero1", "zero2", "zero3"):
                    want = paper(stage, s, k, P, N)
                    for cat, b in want.items():
                        got = rows.get((stage, cat))
                        expect(got == b, f"{dtype} N={N} {stage} {cat}: {got} bytes, the formula at P gives {b}")
                        # At the paper's Psi: the same within the padding.
                        expect(abs(b - paper(stage, s, k, PSI, N)[cat]) <= (s + k) * (L + 1) * N,
                               f"{dtype} N={N} {stage} {cat}: far from the formula at Psi")
                # Mixed precision's 16 Psi: 24.9 GB for DDP; ZeRO-3 on 64 ranks 389 MB.
                if dtype == "bf16" and N == 1:
                    expect(sum(rows[("ddp", c)] for c in ("param", "grad", "optim")) == 16 * PSI, "bf16 DDP: 16 Psi")
                if dtype == "bf16" and N == 64:
                    total = sum(rows[("zero3", c)] for c in ("param", "grad", "optim"))
                    expect(total == 16 * P // 64, f"bf16 ZeRO-3 at N=64: {total} bytes, 16 P / 64 = {16 * P // 64}")
        # Bad input: exit 2 with the flag named, nothing written.
        for args, needle in ((["--model", "gpt2", "--n-layer", "3"], "--model sets it"),
                             (["--n-embd", "100", "--n-head", "3"], "multiple of n_head"),
                             (["--ranks", "0"], "--ranks"), (["--dtype", "fp8"], "--dtype"),
                             (["--n-layer", "1048576", "--n-embd", "1048576", "--n-head", "1"], "exceed 2^62"),
                             (["--out", os.path.join(out, "missing")], "--out")):
            res = subprocess.run([exe, *args], capture_output=True, text=True, timeout=60)
            expect(res.returncode == 2 and needle in res.stderr + res.stdout,
                   f"{args}: exit {res.returncode}, {res.stderr.strip()[:200]}")
    for f in failures:
        print("FAILED:", f)
    print(f"zero_predict_test: {len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

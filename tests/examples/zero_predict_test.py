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


def check_overlap(exe):
    """The overlap model on GPT-2 XL at N = 8 in bf16, 400 TFLOP/s, 50 GB/s, 5 us, worked out here:
    a ring all-gather of one block (s (12 C^2 + 13 C) bytes) takes (N-1)(latency + bytes / (N bw));
    a block's forward 24 C^2 + 4 T C flops a token, its backward twice that."""
    import math
    import re
    N, s, tf, bw, lat = 8, 2, 400e12, 50e9, 5e-6
    block_bytes = s * pad(BLOCK, N)
    gather = (N - 1) * (lat + block_bytes / (N * bw))
    root_gather = (N - 1) * (lat + s * pad(ROOT, N) / (N * bw))  # each pass starts with the root unit
    per_token = 24 * C * C + 4 * T * C
    hide_tokens = gather * tf / per_token
    for mb in (1, 8):
        fwd = per_token * mb * T / tf
        res = subprocess.run([exe, "--model", "gpt2-xl", "--ranks", str(N), "--dtype", "bf16", "--tflops", "400",
                              "--link-gbps", "50", "--micro-batch", str(mb)], capture_output=True, text=True, timeout=60)
        expect(res.returncode == 0, f"overlap mb={mb}: exit {res.returncode}: {res.stderr}")
        out = res.stdout
        m = re.search(r"forward\s+([\d.]+) ms\s+all-gather\s+([\d.]+) ms\s+(\S+)", out)
        b = re.search(r"backward\s+([\d.]+) ms\s+all-gather \+ reduce-scatter\s+([\d.]+) ms\s+(\S+)", out)
        w = re.search(r"waits ([\d.]+) ms for the link \(the root's gathers ([\d.]+) ms of it\).*hides the gather from "
                      r"(\d+) tokens per rank \(micro-batch (\d+)\)", out)
        if not (m and b and w):
            expect(False, f"overlap mb={mb}: lines not found in\n{out}")
            continue
        expect(abs(float(m[1]) - fwd * 1e3) < 1e-4 and abs(float(m[2]) - gather * 1e3) < 1e-4,
               f"mb={mb}: forward {m[1]} / gather {m[2]} ms, by hand {fwd * 1e3:.4f} / {gather * 1e3:.4f}")
        expect(abs(float(b[1]) - 2 * fwd * 1e3) < 1e-4 and abs(float(b[2]) - 2 * gather * 1e3) < 1e-4,
               f"mb={mb}: backward {b[1]} / collectives {b[2]} ms")
        hidden = fwd >= gather
        expect((m[3] == "hidden") == hidden and (b[3] == "hidden") == (2 * fwd >= 2 * gather),
               f"mb={mb}: verdicts {m[3]} / {b[3]}, by hand forward {'hidden' if hidden else 'exposed'}")
        waits = 2 * root_gather + 48 * (max(0, gather - fwd) + max(0, 2 * gather - 2 * fwd))
        expect(abs(float(w[1]) - waits * 1e3) < 1e-3, f"mb={mb}: waits {w[1]} ms, by hand {waits * 1e3:.4f}")
        expect(abs(float(w[2]) - 2 * root_gather * 1e3) < 1e-4, f"mb={mb}: root's gathers {w[2]} ms")
        expect(int(w[3]) == round(hide_tokens) and int(w[4]) == math.ceil(hide_tokens / T),
               f"mb={mb}: hides from {w[3]} tokens (micro-batch {w[4]}), by hand {hide_tokens:.0f}")
    # Without prefetch every gather waits in full; a checkpointed block's backward recomputes its forward.
    res = subprocess.run([exe, "--model", "gpt2-xl", "--ranks", str(N), "--dtype", "bf16", "--tflops", "400",
                          "--link-gbps", "50", "--micro-batch", "8", "--prefetch", "0", "--activation-checkpointing", "1"],
                         capture_output=True, text=True, timeout=60)
    fwd = per_token * 8 * T / tf
    m = re.search(r"forward\s+([\d.]+) ms\s+all-gather\s+([\d.]+) ms\s+exposed: waits ([\d.]+) ms", res.stdout)
    b = re.search(r"backward\s+([\d.]+) ms", res.stdout)
    expect(bool(m and b) and abs(float(m[3]) - gather * 1e3) < 1e-4 and abs(float(b[1]) - 3 * fwd * 1e3) < 1e-4,
           f"prefetch 0 / checkpointing: {res.stdout[-600:]}")
    expect("without prefetch every gather waits in full" in res.stdout, "prefetch 0: no saying so")
    for args, needle in ((["--tflops", "100"], "--link-gbps"), (["--link-latency-us", "50"], "--link-latency-us"),
                         (["--tflops", "1e6", "--link-gbps", "1e-320"], "--link-gbps")):
        res = subprocess.run([exe, "--model", "gpt2", *args], capture_output=True, text=True, timeout=60)
        expect(res.returncode == 2 and needle in res.stderr + res.stdout, f"{args} accepted: {res.returncode}")
    # Gradient accumulation: every micro-step reduces (and ZeRO-3 gathers) again, the post-step
    # gathers and the norm's words stay once a step (it used to be refused without offload).
    def traffic(args):
        with tempfile.TemporaryDirectory() as out:
            res = subprocess.run([exe, "--model", "gpt2", "--ranks", "8", "--out", out, *args], capture_output=True,
                                 text=True, timeout=60)
            expect(res.returncode == 0, f"{args}: {res.stderr}")
            with open(os.path.join(out, "predict_traffic_n8.csv")) as f:
                return {(r["stage"], r["collective"], r["phase"]): (int(r["calls"]), int(r["payload"]), int(r["wire"]))
                        for r in csv.DictReader(f)}
    # --vocab-multiple pads wte as train_gpt does (GPT-2's 50257 -> 50304: 47 rows of 768 more).
    res = subprocess.run([exe, "--model", "gpt2", "--ranks", "8", "--vocab-multiple", "128"], capture_output=True,
                         text=True, timeout=60)
    expect("vocab 50257 (padded to 50304)" in res.stdout and "Psi = 124475904 parameters" in res.stdout,
           f"--vocab-multiple 128: {res.stdout[:300]}")
    one, four = traffic([]), traffic(["--grad-accum", "4"])
    expect(one.keys() == four.keys() and len(one) >= 8, f"--grad-accum 4: other collectives {sorted(four)}")
    for key, row in one.items():
        times = 1 if key[2] in ("post_step_gather", "other") else 4
        expect(four[key] == tuple(times * v for v in row), f"--grad-accum 4, {key}: {four[key]}, want {times} x {row}")


def gib(b):
    """zero_predict's byte format: GiB, or MiB below one GiB, two decimals."""
    return f"{b / 2**30:.2f} GiB" if b >= 2**30 else f"{b / 2**20:.2f} MiB"


def check_offload(exe):
    """Offload on GPT-2 XL, bf16, N = 64, 2 micro-steps a step, by hand: optimizer offload moves
    K P/N to the disk and reads and writes it once a step; parameter offload (ZeRO-3) moves the
    s P/N shard, read by each gather (forward and backward of each micro-step) and written once
    (bf16 casts it from the master: no read). What stays in memory is the gradient shard."""
    import re
    N, s, k, A = 64, 2, 12, 2
    P = L * pad(BLOCK, N) + pad(ROOT, N)
    res = subprocess.run([exe, "--model", "gpt2-xl", "--ranks", str(N), "--dtype", "bf16", "--offload-optimizer", "nvme",
                          "--offload-params", "nvme", "--grad-accum", str(A)], capture_output=True, text=True, timeout=60)
    expect(res.returncode == 0, f"offload: exit {res.returncode}: {res.stderr}")
    rows = re.findall(r"^\s+(\w+)\s+in memory\s+(.+?)\s+on disk\s+(.+?)\s+reads\s+(.+?)\s+writes\s+(.+?)\s*$",
                      res.stdout, re.M)
    expect([r[0] for r in rows] == ["zero3"], f"offload rows {rows}: parameter offload applies to ZeRO-3 only")
    want = (gib(s * P // N), gib((k + s) * P // N), gib(k * P // N + 2 * A * s * P // N), gib((k + s) * P // N))
    for r in rows:
        expect(tuple(r[1:]) == want, f"ZeRO-3 offload {r[1:]}, by hand {want}")


def check_host_tier(exe):
    """Optimizer offload to cpu on a GPU, GPT-2 XL, bf16, N = 8, by hand: the GPU keeps the
    stage's parameters and gradients; the host holds 12 bytes per element the rank updates
    (masters and moments; DDP all P, else P/N) and the exchange buffer's s, which is also what
    crosses each way per step."""
    import re
    N, s = 8, 2
    P = L * pad(BLOCK, N) + pad(ROOT, N)
    res = subprocess.run([exe, "--model", "gpt2-xl", "--ranks", str(N), "--dtype", "bf16", "--offload-optimizer", "cpu"],
                         capture_output=True, text=True, timeout=60)
    expect(res.returncode == 0, f"host tier: exit {res.returncode}: {res.stderr}")
    rows = {m[0]: m[1:] for m in re.findall(
        r"^\s+(\w+)\s+on the GPU\s+(.+?)\s+in host memory\s+(.+?)\s+each way\s+(.+?)\s*$", res.stdout, re.M)}
    want = {"ddp": (2 * s * P, (12 + s) * P, s * P), "zero1": (2 * s * P, (12 + s) * P // N, s * P // N),
            "zero2": (s * P + s * P // N, (12 + s) * P // N, s * P // N),
            "zero3": (2 * s * P // N, (12 + s) * P // N, s * P // N)}
    expect(sorted(rows) == sorted(want), f"host tier rows {sorted(rows)}")
    for stage, (gpu, host, each_way) in want.items():
        expect(rows.get(stage) == (gib(gpu), gib(host), gib(each_way)),
               f"host tier {stage}: printed {rows.get(stage)}, by hand {(gib(gpu), gib(host), gib(each_way))}")
    res = subprocess.run([exe, "--model", "gpt2-xl", "--ranks", "8", "--offload-optimizer", "cpu", "--offload-params",
                          "nvme"], capture_output=True, text=True, timeout=60)
    expect(res.returncode == 2 and "one at a time" in res.stderr, f"cpu with nvme params: {res.returncode} {res.stderr}")


def record_words(n):
    """int32 words of an int8 record of n values: codes (whole words), then a scale per 256."""
    return (n + 3) // 4 + (n + 255) // 256


def check_cluster(exe):
    """Past one node, GPT-2 XL in bf16 on N = 64 ranks, 8 nodes of R = 8, by hand
    (docs/multinode.md): model states per rank and bytes per step, within and across nodes."""
    import re
    N, R, s, k = 64, 8, 2, 12
    M = N // R
    units = [pad(ROOT, N)] + [pad(BLOCK, N)] * L
    P = sum(units)
    norm = 8 * 21  # the exact gradient norm's 21 words
    ring = lambda payload, n: payload * (n - 1) // n
    flat_norm = 2 * ring(norm, N)
    q_gather = sum(4 * N * record_words(u // N) for u in units)
    q_hop1 = sum(4 * record_words(u // N) * M * (R - 1) for u in units)
    q_hop2 = sum(4 * record_words(u // N) * (M - 1) for u in units)
    want = {  # layout: (states, wire, across)
        "DDP": ((2 * s + k) * P, 2 * ring(s * P, N), 2 * ring(s * P, N)),
        "ZeRO-3": ((2 * s + k) * P // N, 3 * ring(s * P, N) + flat_norm, 3 * ring(s * P, N) + flat_norm),
        "HSDP (ZeRO-3, K = R)": ((2 * s + k) * P // R, 3 * ring(s * P, R) + 2 * ring(s * P // R, M) + 2 * ring(norm, R),
                                 2 * ring(s * P // R, M)),
        "ZeRO-3 + hpZ": ((2 * s + k) * P // N, 2 * ring(s * P, N) + ring(s * P, R) + flat_norm,
                         2 * ring(s * P, N) + flat_norm),
        "ZeRO++ (hpZ qwZ qgZ)": ((2 * s + k) * P // N, ring(q_gather, N) + ring(s * P, R) + q_hop1 + q_hop2 + flat_norm,
                                 ring(q_gather, N) + q_hop2 + flat_norm),
    }
    res = subprocess.run([exe, "--model", "gpt2-xl", "--ranks", str(N), "--dtype", "bf16", "--ranks-per-node", str(R)],
                         capture_output=True, text=True, timeout=60)
    expect(res.returncode == 0, f"cluster: exit {res.returncode}: {res.stderr}")
    rows = {m[0].strip(): m[1:] for m in re.findall(
        r"^  (\S.{21})\s+(\d+\.\d+ [GM]iB)\s+(\d+\.\d+ [GM]iB)\s+(\d+\.\d+ [GM]iB)\s+(\d+\.\d+ [GM]iB)\s*$",
        res.stdout, re.M)}
    expect(sorted(rows) == sorted(want), f"cluster layouts {sorted(rows)}")
    for name, (states, wire, across) in want.items():
        got = rows.get(name)
        expect(got == (gib(states), gib(wire), gib(wire - across), gib(across)),
               f"cluster {name}: printed {got}, by hand {(gib(states), gib(wire), gib(wire - across), gib(across))}")
    # ZeRO++ crosses nodes with about an eighth of ZeRO-3's bytes: qwZ's int8 gathers (1/2 of
    # bf16's), hpZ keeps the backward's on the node, qgZ sends 1/R of the gradient in int8.
    expect(want["ZeRO++ (hpZ qwZ qgZ)"][2] * 5 < want["ZeRO-3"][2], "ZeRO++ should cross nodes with < 1/5 of ZeRO-3's bytes")
    # The step-time model: compute plus each link's bytes over its bandwidth (no overlap), or the
    # larger of the two (full overlap); flags that need each other.
    res = subprocess.run([exe, "--model", "gpt2-xl", "--ranks", "64", "--dtype", "bf16", "--ranks-per-node", "8",
                          "--intra-gbps", "450", "--inter-gbps", "200"], capture_output=True, text=True, timeout=60)
    expect(res.returncode == 2 and "--tflops" in res.stderr, f"cluster time without --tflops: {res.returncode} {res.stderr}")


def main():
    exe = sys.argv[1]
    check_overlap(exe)
    check_offload(exe)
    check_host_tier(exe)
    check_cluster(exe)
    expect(PSI == 1_557_611_200, f"GPT-2 XL has {PSI} parameters by this count")
    # The Ultra-Scale Playbook counts h v + L (12 h^2 + 13 h) + 2 h parameters (tied embeddings, no
    # learned positions); GPT-2 adds its T h position embeddings. Its memory table gives 16 bytes
    # per parameter in f32 or in bf16 without f32 gradient accumulation (1B: 16 GB), checked below.
    expect(PSI == C * V + L * (12 * C * C + 13 * C) + 2 * C + T * C, "GPT-2 XL: the Playbook's count plus T h")
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
                if N == 1:  # both dtypes: the paper's 16 Psi, the Playbook's 16 GB per 1B parameters
                    expect(sum(rows[("ddp", c)] for c in ("param", "grad", "optim")) == 16 * PSI, f"{dtype} DDP: 16 Psi")
                if dtype == "bf16" and N == 64:
                    total = sum(rows[("zero3", c)] for c in ("param", "grad", "optim"))
                    expect(total == 16 * P // 64, f"bf16 ZeRO-3 at N=64: {total} bytes, 16 P / 64 = {16 * P // 64}")
        # Bad input: exit 2 with the flag named, nothing written.
        for args, needle in ((["--model", "gpt2", "--n-layer", "3"], "--model sets it"),
                             (["--n-embd", "100", "--n-head", "3"], "multiple of n_head"),
                             (["--ranks", "0"], "--ranks"), (["--dtype", "fp8"], "--dtype"),
                             (["--n-layer", "1048576", "--n-embd", "1048576", "--n-head", "1"], "exceed 2^62"),
                             (["--out", os.path.join(out, "missing")], "--out"),
                             (["--activation-checkpointing", "13"], "13 exceeds n_layer 12")):
            res = subprocess.run([exe, *args], capture_output=True, text=True, timeout=60)
            expect(res.returncode == 2 and needle in res.stderr + res.stdout,
                   f"{args}: exit {res.returncode}, {res.stderr.strip()[:200]}")
    for f in failures:
        print("FAILED:", f)
    print(f"zero_predict_test: {len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

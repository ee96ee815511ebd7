"""PyTorch twin of bench/cpu_ops_bench.cpp: the same ops, sizes and flop counts.

Prints one line per case:  RESULT torch <op> <size> <gflops> <median_ms>
Run with the torch bench/torch_peer.sh picks (PyPI's 2.x in the bench venv, else Debian's 1.13):
  python bench/torch_cpu_ops.py [threads] [sizes]
Attention is the fused scaled_dot_product_attention(is_causal=True) where torch has it; torch
1.13 has not, so there it is the usual softmax(q k^T / sqrt(HS) + causal mask) v, with the mask
built once outside the timing.
"""
import math
import sys
import time

import torch


def median_ms(f):
    # Warm-up, then at least 5 timed runs and about 1.5 s in all (at most 50), as the C++ side.
    for _ in range(2):
        f()
    t0 = time.perf_counter()
    f()
    first = (time.perf_counter() - t0) * 1e3
    reps = min(50, max(5, int(1500.0 / max(first, 1e-3))))
    ms = []
    for _ in range(reps):
        s = time.perf_counter()
        f()
        ms.append((time.perf_counter() - s) * 1e3)
    ms.sort()
    return ms[len(ms) // 2]


def report(op, size, flops, ms):
    print(f"RESULT torch {op} {size} {flops / (ms * 1e6):.2f} {ms:.3f}", flush=True)


def causal_attention(q, k, v, mask):
    if hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))
    att.masked_fill_(mask, float("-inf"))
    return torch.softmax(att, dim=-1) @ v


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    sizes = [int(s) for s in sys.argv[2].split(",")] if len(sys.argv) > 2 else [256, 512, 1024, 2048]
    torch.set_num_threads(threads)
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads")
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for s in sizes:
            a = torch.randn(s, s, generator=g)
            b = torch.randn(s, s, generator=g)
            report("matmul", s, 2.0 * s**3, median_ms(lambda: torch.matmul(a, b)))
        B, NH, HS = 2, 4, 64
        for t in sizes:
            q, k, v = (torch.randn(B, NH, t, HS, generator=g) for _ in range(3))
            mask = torch.ones(t, t, dtype=torch.bool).triu(1)
            report("causal_attention", t, 4.0 * B * NH * t * t * HS / 2.0,
                   median_ms(lambda: causal_attention(q, k, v, mask)))


if __name__ == "__main__":
    main()

"""PyTorch peer for bench/run_zero_stages.sh: the GPT of bench/torch_train_step.py trained with
N CPU processes (gloo) under DDP, and under DDP + ZeroRedundancyOptimizer (ZeRO-1).

Prints one line per mode: `torch mode=<ddp|zero1> ranks=N step_ms=... tokens_per_s=...`.
The global batch is --batch rows (batch/N per rank), as in train_gpt.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

from torch_train_step import GPT, leave_worker, rank_rows


def worker(rank, a, mode, port, out):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(max(1, a.threads // a.ranks))
    dist.init_process_group("gloo", rank=rank, world_size=a.ranks)
    torch.manual_seed(1)
    model = DDP(GPT(a.vocab, a.seq, a.layers, a.heads, a.embd))
    params = list(model.parameters())
    if mode == "zero1":
        opt = ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.AdamW, lr=3e-4, betas=(0.9, 0.95))
    else:
        opt = torch.optim.AdamW(params, lr=3e-4, betas=(0.9, 0.95))
    times = []
    for s in range(a.warmup + a.steps):
        x, y = rank_rows(a, rank, s)
        dist.barrier()
        t0 = time.perf_counter()
        loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()
        dist.barrier()
        if s >= a.warmup:
            times.append((time.perf_counter() - t0) * 1000)
    if rank == 0:
        times.sort()
        out.put(times[len(times) // 2])
    dist.destroy_process_group()
    leave_worker(out)


def main():
    p = argparse.ArgumentParser()
    for k, v in dict(layers=4, heads=4, embd=128, seq=64, batch=8, vocab=256, steps=10, warmup=2, threads=2,
                     ranks=2, port=29517).items():
        p.add_argument("--" + k, type=int, default=v)
    a = p.parse_args()
    ctx = mp.get_context("spawn")
    for i, mode in enumerate(("ddp", "zero1")):
        q = ctx.Queue()
        mp.spawn(worker, args=(a, mode, a.port + i, q), nprocs=a.ranks, join=True)
        ms = q.get()
        print(f"torch mode={mode} ranks={a.ranks} step_ms={ms:.2f} tokens_per_s={a.batch * a.seq / (ms / 1000):.0f}")


if __name__ == "__main__":
    main()

"""PyTorch's side of bench/run_side_by_side.sh: the walkthrough's GPT trained on N CPU ranks
(gloo) under DDP, DDP + ZeroRedundancyOptimizer (ZeRO-1) and FSDP2 fully_shard with
reshard_after_forward=False (ZeRO-2-like) and True (ZeRO-3), from zerodl's exported initial
weights (consolidate_checkpoint's HF directory), on zerodl's batches (the same windows of the
same file, in the same order), with train_gpt's optimizer, schedule and clipping.

Prints one JSON line per mode: {"mode", "ranks", "losses": [per step], "step_ms" (median after
the warm-up steps), "states_mib": rank 0's parameters, gradients and optimizer states (its local
shards under FSDP2 and ZeroRedundancyOptimizer) at the end of the last step, before zero_grad,
"peak_rss_mib": the largest peak resident memory of any rank's process (getrusage)}.
"""
import argparse
import json
import math
import os
import resource
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from safetensors.torch import load_file

from torch_train_step import GPT, decay_groups, leave_worker

MODES = ("ddp", "zero1", "fsdp2_keep", "fsdp2_reshard")


# ---- zerodl's data order (data/token_dataset.cpp): row r of step s starts at
# Philox4x32-10(key = seed, counter = (s, stream = r)) words 0-1 as a 64-bit number, mod the
# number of window starts of the training split. Reproduced here so both sides read the same rows.
def philox(seed, stream, index):
    c0, c1 = index & 0xFFFFFFFF, index >> 32
    c2, c3 = stream & 0xFFFFFFFF, stream >> 32
    k0, k1 = seed & 0xFFFFFFFF, seed >> 32
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0) & 0xFFFFFFFF, p1 & 0xFFFFFFFF, ((p0 >> 32) ^ c3 ^ k1) & 0xFFFFFFFF, p0 & 0xFFFFFFFF
        k0, k1 = (k0 + 0x9E3779B9) & 0xFFFFFFFF, (k1 + 0xBB67AE85) & 0xFFFFFFFF
    return c0, c1


def step_rows(tokens, train_size, seq, seed, step, first, count):
    starts = []
    for r in range(first, first + count):
        w0, w1 = philox(seed, r, step)
        starts.append(((w1 << 32) | w0) % (train_size - seq))
    win = np.stack([tokens[s:s + seq + 1] for s in starts]).astype(np.int64)
    return torch.from_numpy(win[:, :-1].copy()), torch.from_numpy(win[:, 1:].copy())


def cosine_lr(step, a):  # optim/schedule.cpp
    max_lr, min_lr = a.lr, a.lr * a.min_lr_ratio
    if step < a.warmup:
        return max_lr * (step + 1) / a.warmup
    if step >= a.steps:
        return min_lr
    span = a.steps - a.warmup
    progress = (step - a.warmup) / span if span > 0 else 1.0
    return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def load_zerodl_export(model, directory):
    """zerodl's GPT-2 export (Conv1D layout for the four projections) into torch_train_step.GPT."""
    sd = load_file(os.path.join(directory, "model.safetensors"))
    names = {"attn.c_attn": "c_attn", "attn.c_proj": "c_proj", "mlp.c_fc": "c_fc", "mlp.c_proj": "mlp_proj"}
    mine = {}
    for k, v in sd.items():
        k = k.removeprefix("transformer.")
        if k.startswith("h."):
            _, i, rest = k.split(".", 2)
            for src, dst in names.items():
                if rest.startswith(src + "."):
                    kind = rest[len(src) + 1:]
                    v = v.t().contiguous() if kind == "weight" else v
                    rest = dst + "." + kind
            k = f"h.{i}.{rest}"
        mine[k] = v.float()
    model.load_state_dict(mine, strict=True)  # every tensor named, every shape equal


def local_mib(tensors):
    """MiB of the tensors this rank holds (a DTensor's local shard)."""
    return sum((t.to_local() if hasattr(t, "to_local") else t).nbytes for t in tensors if t is not None) / 2**20


def states_mib(model, opt):
    inner = getattr(opt, "optim", opt)  # ZeroRedundancyOptimizer: this rank's own AdamW
    moments = [v for st in inner.state.values() for v in st.values() if torch.is_tensor(v) and v.dim() > 0]
    params = list(model.parameters())
    return [local_mib(params), local_mib(p.grad for p in params), local_mib(moments)]


def worker(rank, a, mode, port, out):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(max(1, a.threads // a.ranks))
    dist.init_process_group("gloo", rank=rank, world_size=a.ranks)
    cfg = json.load(open(os.path.join(a.init, "config.json")))
    model = GPT(cfg["vocab_size"], cfg["n_positions"], cfg["n_layer"], cfg["n_head"], cfg["n_embd"])
    load_zerodl_export(model, a.init)

    adam = dict(lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    if mode in ("ddp", "zero1"):
        from torch.nn.parallel import DistributedDataParallel as DDP
        net = DDP(model)
        if mode == "zero1":
            from torch.distributed.optim import ZeroRedundancyOptimizer
            opt = ZeroRedundancyOptimizer(decay_groups(model, a.weight_decay), optimizer_class=torch.optim.AdamW, **adam)
        else:
            opt = torch.optim.AdamW(decay_groups(model, a.weight_decay), **adam)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("cpu", (a.ranks,))
        reshard = mode == "fsdp2_reshard"
        for block in model.h:  # one fully_shard group per block: zerodl's units
            fully_shard(block, mesh=mesh, reshard_after_forward=reshard)
        fully_shard(model, mesh=mesh, reshard_after_forward=reshard)  # the root: embeddings, ln_f
        net = model
        opt = torch.optim.AdamW(decay_groups(model, a.weight_decay), **adam)

    tokens = np.memmap(a.data, dtype=np.uint8, mode="r")
    train_size = len(tokens) - int(math.floor(len(tokens) * a.val_fraction))
    per = a.batch // a.ranks
    losses, times = [], []
    for step in range(a.steps):
        for g in opt.param_groups:
            g["lr"] = cosine_lr(step, a)
        x, y = step_rows(tokens, train_size, a.seq, a.seed, step, rank * per, per)
        dist.barrier()
        t0 = time.perf_counter()
        loss = net(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        opt.step()
        if step == a.steps - 1:
            states = states_mib(model, opt)
        opt.zero_grad(set_to_none=True)
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        dist.barrier()
        times.append((time.perf_counter() - t0) * 1000)
        losses.append(mean.item() / a.ranks)
    peak = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0])  # KiB on Linux
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    if rank == 0:
        t = sorted(times[a.warm:])
        out.put({"mode": mode, "ranks": a.ranks, "losses": losses, "step_ms": t[len(t) // 2],
                 "states_mib": states, "peak_rss_mib": peak.item()})
    dist.destroy_process_group()
    leave_worker(out)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--init", required=True, help="zerodl's exported initial weights (a consolidate_checkpoint directory)")
    p.add_argument("--data", required=True, help="the text file train_gpt trained on")
    p.add_argument("--modes", default=",".join(MODES))
    for k, v in dict(ranks=2, batch=8, seq=64, steps=30, warm=3, warmup=5, seed=1337, threads=2, port=29631).items():
        p.add_argument("--" + k.replace("_", "-"), dest=k, type=int, default=v)
    for k, v in dict(lr=3e-3, min_lr_ratio=0.1, weight_decay=0.1, grad_clip=1.0, val_fraction=0.1).items():
        p.add_argument("--" + k.replace("_", "-"), dest=k, type=float, default=v)
    a = p.parse_args()
    if a.batch % a.ranks:
        p.error(f"--batch {a.batch} must be divisible by --ranks {a.ranks}")
    ctx = mp.get_context("spawn")
    for i, mode in enumerate(a.modes.split(",")):
        if mode not in MODES:
            p.error(f"unknown mode {mode!r}; one of {', '.join(MODES)}")
        q = ctx.Queue()
        mp.spawn(worker, args=(a, mode, a.port + i, q), nprocs=a.ranks, join=True)
        print(json.dumps(q.get()), flush=True)


if __name__ == "__main__":
    main()

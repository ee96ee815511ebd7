"""The same GPT-2-style model and step as bench/train_step_bench.cpp, in PyTorch (CPU, f32).

Tied LM head, pre-LN blocks, tanh-GELU, causal attention (SDPA when available), AdamW with
decay on matrices only (fused where this torch has it). --mode eager runs it as written;
--mode compile runs the model's forward and backward through torch.compile (the optimizer step
stays fused AdamW). --checkpoint K recomputes blocks 0, K, 2K, ... in the backward
(torch.utils.checkpoint, non-reentrant), as train_step_bench --checkpoint K does. Prints one line
in the same format as the C++ benchmark.
"""
import argparse
import math
import os
import time

import torch
import torch.nn as nn
import torch.utils.checkpoint
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
            mask = torch.ones(T, T, dtype=torch.bool).tril()
            y = att.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        x = x + self.c_proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, V, T, L, H, C, checkpoint=0):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, H) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        self.checkpoint = checkpoint  # recompute blocks 0, k, 2k, ... in the backward (0: off)
        for m in self.modules():  # GPT-2's initialization, as zerodl's: N(0, 0.02) matrices, zero biases
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1)))
        for i, b in enumerate(self.h):
            if self.checkpoint and i % self.checkpoint == 0:
                x = torch.utils.checkpoint.checkpoint(b, x, use_reentrant=False)
            else:
                x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def decay_groups(model, weight_decay):
    """zerodl's parameter groups (optim/param_groups.h): weight decay on matrices only."""
    return [{"params": [p for p in model.parameters() if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in model.parameters() if p.dim() < 2], "weight_decay": 0.0}]


def rank_rows(a, rank, s):
    """Step s's batch (a.batch random sequences of a.vocab ids, the same on every rank), this rank's
    a.batch / a.ranks rows of it: inputs and targets. The peers of the multi-rank benches."""
    per = a.batch // a.ranks
    g = torch.Generator().manual_seed(100 + s)
    ids = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=g)[rank * per:(rank + 1) * per]
    return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()


def leave_worker(out):
    """Ends a finished gloo worker of torch.multiprocessing.spawn (bench/torch_ddp.py,
    bench/torch_side_by_side.py), after dist.destroy_process_group(). With 4 ranks, PyPI's torch
    2.15 aborts about one finished worker in three at interpreter exit ("terminate called without
    an active exception", no Python frame on the stack), and spawn then throws the finished run
    away. The result is on `out` by now: flush it and leave without the teardown."""
    out.close()
    out.join_thread()
    os._exit(0)


def parse_args(argv=None):
    p = argparse.ArgumentParser()
    for k, v in dict(layers=4, heads=4, embd=256, seq=128, batch=8, vocab=256, steps=20, warmup=3, threads=2,
                     checkpoint=0).items():
        p.add_argument("--" + k, type=int, default=v)
    p.add_argument("--mode", choices=("eager", "compile"), default="eager")
    p.add_argument("--dtype", choices=("f32", "bf16"), default="f32")
    return p.parse_args(argv)


def make_step(a):
    """The benchmark's model and its training step: (model, batch() -> (x, y), step(x, y) -> loss)."""
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    model = GPT(a.vocab, a.seq, a.layers, a.heads, a.embd, a.checkpoint)
    fused = {"fused": True} if "fused" in torch.optim.AdamW.__init__.__code__.co_varnames else {}
    opt = torch.optim.AdamW(decay_groups(model, 0.1), lr=3e-4, betas=(0.9, 0.95), eps=1e-8, **fused)
    forward = torch.compile(model) if a.mode == "compile" else model

    def batch():
        ids = torch.randint(0, a.vocab, (a.batch, a.seq + 1))
        return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()

    def step(x, y):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            loss = forward(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return model, batch, step


def main():
    a = parse_args()
    model, batch, step = make_step(a)
    if a.mode == "compile":
        a.warmup = max(a.warmup, 3)  # the first calls compile
    times = []
    for s in range(a.warmup + a.steps):
        x, y = batch()
        t0 = time.perf_counter()
        lv = step(x, y).item()
        t1 = time.perf_counter()
        if s >= a.warmup:
            times.append((t1 - t0) * 1000)
    times.sort()
    med = times[len(times) // 2]
    n = sum(p.numel() for p in model.parameters())
    print(f"torch mode={a.mode} params={n} step_ms={med:.2f} tokens_per_s={a.batch * a.seq / (med / 1000):.0f} loss={lv:.4f}")


if __name__ == "__main__":
    main()

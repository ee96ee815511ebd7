"""GPT-2 124M training step in PyTorch on one GPU: the peer of zerodl's train_gpt in
bench/gpu/run_gpt2.sh (same model, batch, bf16 compute with f32 master weights, AdamW).

A minimal GPT-2 (pre-LN blocks, tanh-GELU, learned positions, tied LM head, vocabulary padded
to 50304 as llm.c does) trained with bf16 autocast (parameters and optimizer states in f32),
fused AdamW (decay on matrices only), F.scaled_dot_product_attention (flash attention on
Hopper). --compile runs it through torch.compile. Random tokens (the speed does not depend on
them). Prints one JSON line: impl, tokens_per_s (timed steps: total tokens / total time), step_ms,
mfu (llm.c's 6N + 6LCT flops per token over the GPU's peak bf16 rate), peak_mem_bytes
(torch.cuda.max_memory_allocated), loss.

    python3 bench/gpu/torch_gpt2.py --batch 16 --seq 1024 --steps 10 --warmup 3 [--compile]
"""
import argparse
import json
import math
import sys
import time


def peak_bf16_tflops(name):
    """Peak dense bf16 TFLOP/s by GPU name: the table of examples/train_gpt.cpp."""
    if "H200" in name:
        return 989.0
    if "H100" in name:
        return 756.0 if "PCIe" in name else 835.0 if "NVL" in name else 989.0
    if "GH200" in name:
        return 989.0
    if "A100" in name:
        return 312.0
    if "A10G" in name:
        return 70.0
    if "L40S" in name:
        return 362.0
    if "RTX 4090" in name:
        return 165.0
    return 0.0


def main():
    p = argparse.ArgumentParser()
    for k, v in dict(layers=12, heads=12, embd=768, seq=1024, batch=16, vocab=50304, steps=10, warmup=3).items():
        p.add_argument("--" + k, type=int, default=v)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--peak-tflops", type=float, default=0.0)
    a = p.parse_args()

    try:
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    except ImportError as e:
        print(json.dumps({"impl": "torch", "error": f"no PyTorch: {e}"}))
        return 0
    if not torch.cuda.is_available():
        print(json.dumps({"impl": "torch", "error": "torch sees no CUDA device"}))
        return 0

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
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.c_proj(y.transpose(1, 2).reshape(B, T, C))
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self, V, T, L, H, C):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
            self.h = nn.ModuleList(Block(C, H) for _ in range(L))
            self.ln_f = nn.LayerNorm(C)
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, 0.0, 0.02)
                if isinstance(m, nn.Linear) and m.bias is not None:
                    nn.init.zeros_(m.bias)

        def forward(self, idx, targets):
            pos = torch.arange(idx.size(1), device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for b in self.h:
                x = b(x)
            logits = self.ln_f(x) @ self.wte.weight.t()  # tied head
            return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))

    dev = torch.device("cuda")
    torch.manual_seed(1)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    model = GPT(a.vocab, a.seq, a.layers, a.heads, a.embd).to(dev)
    n_params = sum(q.numel() for q in model.parameters())
    decay = [q for q in model.parameters() if q.dim() >= 2]
    no_decay = [q for q in model.parameters() if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    step_fn = model
    if a.compile:
        step_fn = torch.compile(model)
    g = torch.Generator(device=dev)
    g.manual_seed(1)
    torch.cuda.reset_peak_memory_stats()
    total_ms = 0.0
    loss_value = float("nan")
    for s in range(a.warmup + a.steps):
        ids = torch.randint(0, 256, (a.batch, a.seq + 1), device=dev, generator=g)
        x, y = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            loss = step_fn(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss_value = loss.item()  # synchronizes
        torch.cuda.synchronize()
        if s >= a.warmup:
            total_ms += (time.perf_counter() - t0) * 1000
    tokens_per_s = a.batch * a.seq * a.steps / (total_ms / 1000)
    name = torch.cuda.get_device_name(0)
    peak = a.peak_tflops or peak_bf16_tflops(name)
    flops_per_token = 6 * n_params + 6 * a.layers * a.embd * a.seq
    out = {
        "impl": "torch.compile" if a.compile else "torch eager",
        "gpu": name,
        "params": n_params,
        "tokens_per_s": tokens_per_s,
        "step_ms": total_ms / a.steps,
        "mfu": flops_per_token * tokens_per_s / (peak * 1e12) if peak > 0 else None,
        "peak_mem_bytes": torch.cuda.max_memory_allocated(),
        "loss": loss_value,
        "torch": torch.__version__,
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

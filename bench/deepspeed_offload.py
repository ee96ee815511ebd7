"""DeepSpeed peer for zerodl's ZeRO offload: the GPT of bench/torch_train_step.py (8 layers, 4 heads,
n_embd 256, seq 64, vocab 256, batch 8 by default) trained with deepspeed.initialize under ZeRO
stage 3, in three modes:
  none  ZeRO-3, parameters and optimizer state kept in memory
  cpu   ZeRO-Offload: offload_param and offload_optimizer to device "cpu"
  nvme  ZeRO-Infinity: offload_param and offload_optimizer to device "nvme" under --dir (async_io op)
Each mode runs in its own launch (python -m torch.distributed.run, gloo on the CPU accelerator), a few
warmup steps then --steps timed steps. The optimizer is AdamW (DeepSpeedCPUAdam when offloading).
Prints the CPU model, then one line per mode:
  deepspeed mode=<m> ranks=N dtype=<d> step_ms=<median> tokens_per_s=... loss=...
or, for a mode that fails,
  deepspeed mode=<m> cannot run here: <reason>
nvme_params counts the parameter partitions really swapped to NVMe: DeepSpeed swaps only partitions
of at least 1 MiB, so at n_embd 256 the parameters stay in CPU memory and only the optimizer state
(fp32 master, Adam moments, gradients) goes to --dir. On the CPU accelerator DeepSpeed 0.19.8 gives the
parameter swapper bf16 whatever the model's dtype where torch lacks mkldnn fp16 (as here), so f32
with swapped parameters (n_embd >= 512) fails with a dtype mismatch; bf16 works.
Exit status: 0 when every requested mode ran, 3 when one or more could not (one line each), and 3
with "DeepSpeed: cannot run here: <reason>" when deepspeed does not even import.

  python bench/deepspeed_offload.py --dir /tmp/ds_swap                   # 1 rank, all modes, f32
  python bench/deepspeed_offload.py --dir /tmp/ds_swap --ranks 2 --dtype bf16 --modes cpu,nvme
Needs torch (bench/setup_torch_venv.sh) plus `pip install deepspeed` and, for nvme, libaio-dev; the
first run JIT-compiles DeepSpeed's cpu_adam and async_io ops (ninja, minutes).
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def cpu_model():
    with open("/proc/cpuinfo") as f:
        names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    return f"{names[0] if names else 'unknown'} x{len(names)}"


def ds_config(a, mode):
    zero = {"stage": 3, "stage3_param_persistence_threshold": 0}
    if mode != "none":
        zero["offload_param"] = {"device": mode, "pin_memory": False}
        zero["offload_optimizer"] = {"device": mode, "pin_memory": False}
    if mode == "nvme":
        swap = os.path.abspath(a.dir)
        zero["offload_param"].update(nvme_path=swap, buffer_count=8, buffer_size=int(2e6), max_in_cpu=0)
        zero["offload_optimizer"].update(nvme_path=swap, buffer_count=4)
        # DeepSpeed 0.19.8 on the CPU accelerator fails in the NVMe parameter prefetch ("param N already
        # assigned swap buffer id M") from the second step on; fetching on demand works.
        zero["stage3_prefetch_bucket_size"] = 0
    cfg = {
        "train_micro_batch_size_per_gpu": a.batch // a.ranks,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8,
                                                  "weight_decay": 0.1}},
        "zero_optimization": zero,
        "steps_per_print": 10 ** 9,
        "wall_clock_breakdown": False,
    }
    if a.dtype == "bf16":
        cfg["bf16"] = {"enabled": True}
    if mode == "nvme":
        # Block sizes for DeepSpeed's libaio handle; small, as the swap files here are small.
        cfg["aio"] = {"block_size": 1 << 20, "queue_depth": 8, "thread_count": 1,
                      "single_submit": False, "overlap_events": True}
    return cfg


def worker(a):
    """One rank of one mode (started by torch.distributed.run)."""
    import torch
    import deepspeed
    sys.path.insert(0, HERE)
    from torch_train_step import GPT, rank_rows

    torch.set_num_threads(max(1, a.threads // a.ranks))
    rank = int(os.environ.get("RANK", 0))
    deepspeed.init_distributed(dist_backend="gloo")
    cfg = ds_config(a, a.mode)
    torch.manual_seed(1)
    model = GPT(a.vocab, a.seq, a.layers, a.heads, a.embd)  # small: built whole, partitioned by initialize
    # The tied LM head reads wte.weight outside the embedding module: tell ZeRO-3 to gather it there.
    deepspeed.zero.register_external_parameter(model, model.wte.weight)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)

    times = []
    for s in range(a.warmup + a.steps):
        x, y = rank_rows(a, rank, s)
        torch.distributed.barrier()
        t0 = time.perf_counter()
        loss = engine(x, y)
        engine.backward(loss)
        engine.step()
        lv = loss.item()
        torch.distributed.barrier()
        if s >= a.warmup:
            times.append((time.perf_counter() - t0) * 1000)
    if rank == 0:
        times.sort()
        med = times[len(times) // 2]
        # DeepSpeed keeps a parameter partition under 1 MiB (in its swap dtype) in CPU memory even with
        # offload_param nvme: count the ones that really live on NVMe.
        ps = list(engine.module.parameters())
        on_nvme = sum(getattr(p.ds_tensor, "final_location", None) == "nvme" for p in ps)
        print(f"deepspeed mode={a.mode} ranks={a.ranks} dtype={a.dtype} step_ms={med:.2f} "
              f"tokens_per_s={a.batch * a.seq / (med / 1000):.0f} loss={lv:.4f} nvme_params={on_nvme}/{len(ps)}",
              flush=True)


def reason(log):
    """The most telling line of a failed run's log: the last exception or assertion message."""
    lines = [l.strip() for l in log.splitlines() if l.strip()]
    keys = ("Error", "Exception", "error:", "assert")
    hits = [l for l in lines if any(k in l for k in keys) and not l.startswith(("File ", "Traceback"))]
    return (hits or lines or ["no output"])[-1][:400]


def run_mode(a, mode, argv):
    env = dict(os.environ, OMP_NUM_THREADS=str(max(1, a.threads // a.ranks)), MAX_JOBS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={a.ranks}",
           os.path.abspath(__file__), "--worker", "--mode", mode] + argv
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    result = [l for l in p.stdout.splitlines() if l.startswith(f"deepspeed mode={mode} ")]
    if p.returncode == 0 and result:
        print(result[-1], flush=True)
        return True
    if a.log:
        with open(f"{a.log}.{mode}.log", "w") as f:
            f.write(p.stdout)
    print(f"deepspeed mode={mode} cannot run here: {reason(p.stdout)}", flush=True)
    return False


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for k, v in dict(layers=8, heads=4, embd=256, seq=64, batch=8, vocab=256, steps=10, warmup=3,
                     threads=2, ranks=1).items():
        p.add_argument("--" + k, type=int, default=v)
    p.add_argument("--dtype", choices=("f32", "bf16"), default="f32")
    p.add_argument("--dir", default=None, help="NVMe swap folder (default: a fresh temporary folder)")
    p.add_argument("--modes", default="none,cpu,nvme")
    p.add_argument("--log", default=None, help="write a failed mode's full log to LOG.<mode>.log")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--mode", default="none", help=argparse.SUPPRESS)
    a, rest = p.parse_known_args()
    if a.worker:
        return worker(a)

    print(f"cpu: {cpu_model()}", flush=True)
    try:
        import deepspeed  # noqa: F401  (imported here only to fail early with one clear line)
        import torch
        print(f"torch {torch.__version__} deepspeed {deepspeed.__version__} "
              f"accelerator {deepspeed.get_accelerator().device_name()}", flush=True)
    except Exception as e:  # deepspeed missing or broken
        print(f"DeepSpeed: cannot run here: {type(e).__name__}: {e}", flush=True)
        return 3
    if a.dir is None:
        a.dir = tempfile.mkdtemp(prefix="ds_swap_")
    os.makedirs(a.dir, exist_ok=True)
    argv = [f"--{k}={getattr(a, k)}" for k in ("layers", "heads", "embd", "seq", "batch", "vocab", "steps",
                                                "warmup", "threads", "ranks", "dtype", "dir")]
    ok = [run_mode(a, m, argv) for m in a.modes.split(",")]
    return 0 if all(ok) else 3


if __name__ == "__main__":
    sys.exit(main())

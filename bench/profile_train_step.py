"""Where one training step's time goes, by op family: zerodl (perf samples of
bench/train_step_bench, grouped by the symbol they land in) next to PyTorch (torch.profiler's
self CPU time per aten op, eager mode, fused AdamW), same model, shape and threads.
Run by bench/profile_train_step.sh, which records the perf data; this script reads it and
profiles the PyTorch step itself.

  python bench/profile_train_step.py PERF_DATA ZERODL_STEP_MS [shape flags of torch_train_step.py]
"""
import re
import subprocess
import sys

# (family, zerodl symbol pattern, torch op pattern). A zerodl sample goes to the first frame,
# from the leaf up, that matches a family, in this order; a torch op to its first match.
FAMILIES = [
    # oneDNN's kernels are generated at run time: perf names them only by its map of JIT code
    # (/tmp/perf-PID.map), and zerodl runs oneDNN for matrix products only.
    ("matmul (GEMM)", r"gebp|gemm|lhs_process|general_matrix|kernels::cpu::matmul|/perf-\d+\.map",
     r"aten::(mm|addmm|bmm|matmul|linear|baddbmm)$"),
    ("attention", r"attention", r"scaled_dot_product|flash_attention|_efficient_attention"),
    ("layer norm", r"layer_norm", r"layer_norm"),
    ("GELU", r"gelu", r"gelu"),
    ("softmax, cross-entropy", r"softmax|cross_entropy", r"softmax|nll_loss|cross_entropy"),
    ("embedding", r"embedding", r"embedding"),
    ("AdamW", r"adamw|optim::|Optimizer", r"adam|_foreach|_fused"),
    ("elementwise, reductions", r"kernels::cpu::(binary|unary|elementwise|reduce|sum|square_sum|scale|fill|axpy)",
     r"aten::(add|mul|sub|div|sum|mean|fill_|zero_|neg|pow|sqrt|add_|mul_|div_|where|masked_fill)"),
    ("copies, views", r"memmove|memcpy|copy|contiguous|strided|transpose|permute|cat",
     r"copy_|clone|contiguous|cat|transpose|permute|view|reshape|split|slice|unsafe|_to_copy|t$|expand"),
    ("memory (alloc, zero, page faults)", r"memset|page_fault|clear_page|malloc|free|mmap|munmap|Storage|allocat",
     r"empty|resize|zeros"),
    ("runtime (OpenMP waits, autograd)", r"__kmp|kmp_|libomp|autograd|Engine|Node", r"autograd|Backward|detach|ones_like"),
]
INIT = r"nn::GPT::GPT|init_elements"  # parameter init, before the timed steps


def family(name, col, runtime=True):
    for f in FAMILIES:
        if (runtime or not f[0].startswith("runtime")) and re.search(f[col], name, re.I):
            return f[0]
    return "other"


def stack_family(frames, region):
    """The family of the outermost zerodl kernel on the stack (so a GEMM inside the attention
    kernel counts as attention, as inside torch's fused attention op); else the first family
    from the leaf up (a parallel region's body named by `region`); the runtime (OpenMP waits,
    autograd bookkeeping) only where nothing else is on the stack."""
    for fr in reversed(frames):
        if ".omp_outlined." in fr and fr.split("+")[0] in region:
            return region[fr.split("+")[0]]
        if "kernels::cpu::" in fr and family(fr, 1, runtime=False) != "other":
            return family(fr, 1, runtime=False)
    for fr in frames:
        body = fr.split("+")[0]
        if ".omp_outlined." in fr and body in region:
            return region[body]
        if family(fr, 1, runtime=False) != "other":
            return family(fr, 1, runtime=False)
    return next((family(fr, 1) for fr in frames if family(fr, 1) != "other"), "other")


def frame_name(line):
    """A callchain line of `perf script` ("IP SYMBOL+0xOFF (DSO)") as "SYMBOL+0xOFF (DSO)". A
    parallel region's body is named .omp_outlined..N in each source file, so several bodies share
    a name: each is told apart by its start address (IP - OFF), as ".omp_outlined..N@START"."""
    parts = line.strip().split(" ", 1)
    if len(parts) < 2:
        return parts[0]
    ip, rest = parts
    m = re.match(r"(\.omp_outlined\.\S*?)\+0x([0-9a-f]+)(.*)", rest)
    if m:
        start = int(ip, 16) - int(m.group(2), 16)
        return f"{m.group(1)}@{start:x}+0x{m.group(2)}{m.group(3)}"
    return rest


def samples(perf_data):
    """(thread, time in s, [frame symbols, leaf first]) per perf sample, from `perf script`."""
    out = subprocess.run(["perf", "script", "-i", perf_data, "-F", "tid,time,ip,sym,symoff,dso"],
                         capture_output=True, text=True, check=True).stdout
    for block in out.split("\n\n"):
        lines = [l for l in block.splitlines() if l.strip()]
        if not lines:
            continue
        tid, time = lines[0].split()[:2]
        yield tid, float(time.rstrip(":")), [frame_name(l) for l in lines[1:]]


def zerodl_shares(perf_data):
    """Shares of the step's samples by family. OpenMP workers run a region's body
    (.omp_outlined.N) with no kernel above it on their stack; the main thread runs the same
    body under the kernel that opened the region, so the body is named from there.
    Every thread's samples up to the end of parameter init are left out: the main thread's carry
    the init on their stack, but a worker already started (a bf16 model's first parallel cast)
    spins in OpenMP's wait meanwhile, and its samples would count as the step's runtime."""
    all_samples = list(samples(perf_data))
    init_end = max((t for _, t, f in all_samples if any(re.search(INIT, x) for x in f)), default=float("-inf"))
    data = [(tid, f) for tid, t, f in all_samples if t > init_end]
    region = {}
    for _, frames in data:
        for i, fr in enumerate(frames):
            if ".omp_outlined." in fr:
                fam = stack_family(frames[i + 1:], {})
                if fam != "other" and not fam.startswith("runtime"):
                    region.setdefault(fr.split("+")[0], fam)
    shares = {}
    for _, frames in data:
        fam = stack_family(frames, region)
        shares[fam] = shares.get(fam, 0) + 1
    total = sum(shares.values())
    return {k: v / total for k, v in shares.items()}


def torch_step(argv):
    """ms per step by family, from torch.profiler over 5 steps of bench/torch_train_step.py's step."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from torch_train_step import make_step, parse_args
    _, batch, step = make_step(parse_args(argv))
    for _ in range(3):
        step(*batch())
    steps = 5
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step(*batch())
    shares = {}
    for e in prof.key_averages():
        fam = family(e.key, 2)
        shares[fam] = shares.get(fam, 0.0) + e.self_cpu_time_total / 1000.0 / steps  # ms per step
    return shares, torch.__version__


def main():
    perf_data, z_ms, argv = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
    z = zerodl_shares(perf_data)
    t, version = torch_step(argv)
    t_ms = sum(t.values())
    print(f"\n{'op family':<38} {'zerodl ms':>10} {'%':>5}   {'torch ms':>9} {'%':>5}")
    for name in [f[0] for f in FAMILIES] + ["other"]:
        zm, tm = z.get(name, 0.0) * z_ms, t.get(name, 0.0)
        if zm < 0.05 and tm < 0.05:
            continue
        print(f"{name:<38} {zm:10.1f} {100 * zm / z_ms:5.1f}   {tm:9.1f} {100 * tm / t_ms:5.1f}")
    print(f"{'step':<38} {z_ms:10.1f} {100.0:5.1f}   {t_ms:9.1f} {100.0:5.1f}")
    print(f"zerodl: perf samples of the steps (parameter init excluded) by the outermost kernel on the stack, times the\n"
          f"measured median step (GEMMs inside the attention kernel may count as GEMM: docs/cpu_performance.md);\n"
          f"torch {version}: profiler self CPU time per aten op (eager, fused AdamW; profiling adds overhead).")


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# Tokens/s and peak memory per rank of DDP and ZeRO-1/2/3 on N CPU ranks (train_gpt under
# mpirun, the same model and global batch for every stage), the ZeRO-3 / DDP step-time ratio,
# and PyTorch's DDP and DDP + ZeroRedundancyOptimizer (gloo) on the same model as a peer.
#   bash bench/run_zero_stages.sh [BUILD_DIR] [N...]          (default: build, N = 2 4)
# Model: L=4, H=4, C=128, T=64, global batch 8, f32; 12 timed steps after 3 warm-up steps.
set -euo pipefail
source "$(dirname "$0")/zero_bench_setup.sh" "$@"
source "$root/bench/torch_peer.sh"
echo "CPU: $cpu_desc; peer: ${torch_desc:-none}"

summarize() {  # metrics file -> "median_ms peak_bytes tokens_per_s"
  python3 - "$1" "$warm" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1]) if '"tokens_per_s"' in l]
rows = rows[int(sys.argv[2]):]
ms = statistics.median(r["ms"] for r in rows)
peak = max(r["mem"]["peak"] for r in rows)
states = rows[-1]["mem"]
print(f'{ms:.1f} {peak} {statistics.median(r["tokens_per_s"] for r in rows):.0f} '
      f'{states["param"]} {states["grad"]} {states["optim"]}')
PY
}

printf '%-6s %-6s %10s %12s %14s %12s %12s %12s\n' ranks stage step_ms tokens/s peak_MiB param_MiB grad_MiB optim_MiB
for n in "${ranks[@]}"; do
  declare -A ms=()
  for stage in 0 1 2 3; do
    f="$tmp/m-$n-$stage.jsonl"
    OMP_NUM_THREADS=$(( threads / n > 0 ? threads / n : 1 )) "${mpirun[@]}" -np "$n" "$build/examples/train_gpt" "${model[@]}" \
      --steps "$steps" --zero-stage "$stage" --eval-every 0 --warmup 2 --metrics "$f" >/dev/null
    read -r m peak tok p g o < <(summarize "$f")
    ms[$stage]=$m
    awk -v n="$n" -v s="$stage" -v m="$m" -v t="$tok" -v pk="$peak" -v p="$p" -v g="$g" -v o="$o" 'BEGIN {
      printf "%-6s %-6s %10.1f %12s %14.2f %12.3f %12.3f %12.3f\n", n, "zero" s, m, t, pk/1048576, p/1048576, g/1048576, o/1048576 }'
  done
  awk -v a="${ms[3]}" -v b="${ms[0]}" -v n="$n" 'BEGIN { printf "N=%s: ZeRO-3 / DDP step time = %.2f\n", n, a / b }'
  if [ -n "$torch_py" ]; then
    (cd "$root/bench" && "$torch_py" torch_ddp.py --ranks "$n" --threads "$threads" --layers 4 --heads 4 \
      --embd 128 --seq 64 --batch 8 --steps $((steps - warm)) --warmup "$warm") || echo "(torch peer failed)"
  fi
done

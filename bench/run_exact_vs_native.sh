#!/usr/bin/env bash
# What exact reduction costs: train_gpt's step time with --reduction exact (a fixed pairwise
# tree over ranks and micro-batches; docs/exactness.md) next to --reduction native (MPI's own
# all-reduce / reduce-scatter), same run, every stage, N ranks; with and without gradient
# accumulation; model bytes on the wire per step from the comm ledger.
#   bash bench/run_exact_vs_native.sh [BUILD_DIR] [N...]        (default: build, N = 2 4)
# Model: L=4, H=4, C=128, T=64, batch 8 per micro-step, f32; 12 timed steps after 3 warm-up
# steps; exact and native alternate per stage so both see the same machine load.
set -euo pipefail
source "$(dirname "$0")/zero_bench_setup.sh" "$@"

summarize() {  # metrics file -> "median_ms model_wire_bytes final_loss"
  python3 - "$1" "$warm" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1]) if '"tokens_per_s"' in l]
timed = rows[int(sys.argv[2]):]
wire = sum(v["wire"] for k, v in rows[-1]["comm"].items() if not k.endswith(("/other", "/metrics")))
print(f'{statistics.median(r["ms"] for r in timed):.1f} {wire} {rows[-1]["loss"]!r}')
PY
}

simd=$(grep -qw avx512f /proc/cpuinfo && echo avx512f || (grep -qw avx2 /proc/cpuinfo && echo avx2 || echo "no avx2"))
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//') ($threads cores, $simd)"
printf '%-3s %-6s %-5s %11s %11s %8s %14s %14s  %s\n' N stage accum exact_ms native_ms ratio exact_wire native_wire losses
for n in "${ranks[@]}"; do
  for accum in 1 2; do
    for stage in 0 1 2 3; do
      declare -A ms=() wire=() loss=()
      for red in exact native; do
        f="$tmp/m-$n-$stage-$accum-$red.jsonl"
        OMP_NUM_THREADS=$(( threads / n > 0 ? threads / n : 1 )) "${mpirun[@]}" -np "$n" "$build/examples/train_gpt" \
          "${model[@]}" --grad-accum "$accum" --steps "$steps" --zero-stage "$stage" --reduction "$red" \
          --eval-every 0 --warmup 2 --metrics "$f" >/dev/null
        read -r ms[$red] wire[$red] loss[$red] < <(summarize "$f")
      done
      awk -v n="$n" -v s="$stage" -v a="$accum" -v e="${ms[exact]}" -v m="${ms[native]}" -v we="${wire[exact]}" \
          -v wn="${wire[native]}" -v le="${loss[exact]}" -v ln="${loss[native]}" 'BEGIN {
        printf "%-3s %-6s %-5s %11.1f %11.1f %8.2f %14d %14d  %s\n", n, "zero" s, a, e, m, e / m, we, wn,
               (le == ln ? "same" : "differ") }'
    done
  done
done
echo "ratio = exact / native step time; wire = model bytes sent per rank in the last step (the comm ledger)"

#!/usr/bin/env bash
# Optimizer offload to cpu on one GPU (the host tier, docs/offload.md): GPT-2 124M step time and
# the GPU's peak memory with the masters and Adam's moments in host memory, next to the same run
# without offload, at ZeRO stage 0 and 3. bf16, B=16 (ZDL_BENCH_BATCH), T=1024, 3 warm-up + 5
# timed steps, one process (the local backend). The CPU's update runs on every core the process
# may use (ZDL_OFFLOAD_THREADS: another thread count), the same count for both runs.
#
#   bash bench/gpu/run_offload.sh [BUILD_DIR]        # default build-gpu
#
# Prints the host CPU, one row per run (stage, offload, ms per step, tokens/s, GPU peak GiB from
# the ledger) with train_gpt's offload line, and per stage the offloaded step over the plain one.
# Exit status: 0 when every run worked (or no GPU: nothing measured), 1 otherwise.
set -uo pipefail
NAME=run_offload
source "$(dirname "$0")/common.sh"
B="${ZDL_BENCH_BATCH:-16}"
W=3
S=5
export OMP_NUM_THREADS="${ZDL_OFFLOAD_THREADS:-$(env -u OMP_NUM_THREADS nproc)}"
echo "host CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(env -u OMP_NUM_THREADS nproc) cores," \
  "OMP_NUM_THREADS=$OMP_NUM_THREADS"
failed=0
table="$work/table"
printf '%-8s %-8s %9s %10s %9s\n' stage offload step_ms tokens/s gpu_GiB
for stage in 0 3; do
  for off in none cpu; do
    m="$work/m_${stage}_$off.jsonl" log="$work/log_${stage}_$off"
    if ! "$exe" --device cuda --zero-stage "$stage" --offload-optimizer "$off" --dtype bf16 --data "$work/data.bin" \
        "${GPT2[@]}" --batch "$B" --steps $((W + S)) --eval-every 0 --log-every 1 --metrics "$m" >"$log" 2>&1; then
      echo "run_offload: stage $stage offload $off failed:"; tail -n 5 "$log"; failed=1; continue
    fi
    step_row "$m" "$W" "$stage" "$off" | tee -a "$table"
    grep -m1 '^offload:' "$log" | sed 's/^/  /'
  done
done
[ -f "$table" ] && awk '$2 == "none" {p[$1] = $3}
  $2 == "cpu" && p[$1] {printf "summary: stage %s: the offloaded step takes %.2fx the plain one\n", $1, $3 / p[$1]}' "$table"
exit "$failed"

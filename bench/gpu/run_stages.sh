#!/usr/bin/env bash
# GPT-2 124M step time on one GPU under each ZeRO stage and both one-rank backends (local: no
# collective runs; nccl: NCCL's own one-rank collectives): what the sharding machinery costs
# when there is nothing to shard. bf16, B=16 (ZDL_BENCH_BATCH), T=1024, 3 warm-up + 5 timed steps.
#
#   bash bench/gpu/run_stages.sh [BUILD_DIR]        # default build-gpu
#
# Prints one row per run (stage, backend, ms per step, tokens/s, peak GiB from the ledger).
# Exit status: 0 when every run worked (or no GPU: nothing measured), 1 otherwise.
set -uo pipefail
NAME=run_stages
source "$(dirname "$0")/common.sh"
B="${ZDL_BENCH_BATCH:-16}"
W=3
S=5
failed=0
printf '%-8s %-8s %9s %10s %9s\n' stage backend step_ms tokens/s peak_GiB
for backend in local nccl; do
  flag=nccl
  [ "$backend" = local ] && flag=auto  # one process, no launcher: the local backend
  for stage in 0 1 2 3; do
    m="$work/m_${stage}_$backend.jsonl"
    if ! "$exe" --device cuda --zero-stage "$stage" --dist-backend "$flag" --dtype bf16 --data "$work/data.bin" \
        "${GPT2[@]}" --batch "$B" --steps $((W + S)) --eval-every 0 --log-every 1 --metrics "$m" >"$work/log" 2>&1; then
      echo "run_stages: stage $stage $backend failed:"; tail -n 5 "$work/log"; failed=1; continue
    fi
    step_row "$m" "$W" "$stage" "$backend"
  done
done
exit "$failed"

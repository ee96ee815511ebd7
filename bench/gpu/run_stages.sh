#!/usr/bin/env bash
# GPT-2 124M step time on one GPU under each ZeRO stage and both one-rank backends (local: no
# collective runs; nccl: NCCL's own one-rank collectives): what the sharding machinery costs
# when there is nothing to shard. bf16, B=16 (ZDL_BENCH_BATCH), T=1024, 3 warm-up + 5 timed steps.
#
#   bash bench/gpu/run_stages.sh [BUILD_DIR]        # default build-gpu
#
# Prints one row per run (stage, backend, ms per step, tokens/s, peak GiB from the ledger) and a
# "summary:" line. Exit status: 0 when every run worked (or no GPU: nothing measured), 1 otherwise.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$root/build-gpu}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
exe="$build/examples/train_gpt"
B="${ZDL_BENCH_BATCH:-16}"
W=3
S=5
PY="${PYTHON:-python3}"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep "^GPU" >/dev/null; then
  echo "run_stages: no GPU visible (nvidia-smi lists none): nothing measured"
  exit 0
fi
[ -x "$exe" ] || { echo "run_stages: no $exe"; exit 1; }
work="$(mktemp -d /tmp/zdl_bench_stages.XXXXXX)"
trap 'rm -rf "$work"' EXIT
"$PY" -c "import os; open('$work/data.bin', 'wb').write(os.urandom(16 << 20))"
failed=0
printf '%-6s %-8s %9s %10s %9s\n' stage backend step_ms tokens/s peak_GiB
for backend in local nccl; do
  flag=nccl
  [ "$backend" = local ] && flag=auto  # one process, no launcher: the local backend
  for stage in 0 1 2 3; do
    m="$work/m_${stage}_$backend.jsonl"
    if ! "$exe" --device cuda --zero-stage "$stage" --dist-backend "$flag" --dtype bf16 --data "$work/data.bin" \
        --n-layer 12 --n-head 12 --n-embd 768 --seq 1024 --batch "$B" --vocab-size 50257 --vocab-multiple 128 \
        --steps $((W + S)) --eval-every 0 --log-every 1 --metrics "$m" >"$work/log" 2>&1; then
      echo "run_stages: stage $stage $backend failed:"; tail -n 5 "$work/log"; failed=1; continue
    fi
    "$PY" - "$m" "$W" "$stage" "$backend" <<'EOF'
import json, sys
path, warm, stage, backend = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
steps = [j for j in map(json.loads, open(path)) if "tokens_per_s" in j]
timed = [j for j in steps if j["step"] > warm]
ms = sum(j["ms"] for j in timed) / len(timed)
tps = sum(j["tokens_per_s"] for j in timed) / len(timed)
print(f"{stage:<6} {backend:<8} {ms:9.1f} {tps:10.0f} {max(j['mem']['peak'] for j in steps) / 2**30:9.2f}")
EOF
  done
done
exit "$failed"

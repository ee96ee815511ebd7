#!/usr/bin/env bash
# What activation checkpointing costs in step time and saves in activation memory (f32, 2
# threads): zerodl's train step with every block recomputed in the backward next to the plain
# step, and the same ratio for PyTorch eager with torch.utils.checkpoint (non-reentrant), same
# run, same machine. zerodl's runs must give the same loss to the last digit.
#   bash bench/run_activation_checkpointing.sh [BUILD_DIR] [--layers 4 --embd 256 ...]
# Without shape flags: L4 H4 C256 T128 B8 and L6 H6 C384 T256 B4 (run_train_step.sh's shapes).
# Each configuration runs ROUNDS times (default 3), alternating, and the best median is kept,
# so a busy neighbour hurts both sides alike.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
shift || true
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
rounds="${ROUNDS:-3}"
source "$root/bench/torch_peer.sh"
source "$root/bench/result_fields.sh"
echo "CPU: $cpu_desc; $OMP_NUM_THREADS threads; peer: ${torch_desc:-none}"

if [ $# -gt 0 ]; then shapes=("$*"); else
  shapes=("--layers 4 --heads 4 --embd 256 --seq 128 --batch 8" "--layers 6 --heads 6 --embd 384 --seq 256 --batch 4")
fi
min() { awk -v a="$1" -v b="$2" 'BEGIN { print (b == "" || a + 0 < b + 0) ? a : b }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf (a != "" && b > 0 ? "%.2f" : "-"), a / b }'; }

rows=()
status=0
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
for shape in "${shapes[@]}"; do
  # Index k: 0 without checkpointing, 1 with it. Best step time of the rounds, zerodl and torch;
  # zerodl's loss and activation peak (the same every round).
  zerodl_ms=("" "") torch_ms=("" "") loss=("" "") peak=("" "")
  for _ in $(seq "$rounds"); do
    for k in 0 1; do
      # shellcheck disable=SC2086
      result=$("$build/bench/train_step_bench" $shape --checkpoint $k)
      zerodl_ms[k]=$(min "$(field "$result" step_ms)" "${zerodl_ms[k]}")
      loss[k]=$(field "$result" loss)
      peak[k]=$(field "$result" activation_peak)
      [ -n "$torch_py" ] || continue
      # shellcheck disable=SC2086
      result=$("$torch_py" "$root/bench/torch_train_step.py" --threads "$OMP_NUM_THREADS" --checkpoint $k $shape 2>/dev/null) || result=""
      ms=$(field "$result" step_ms)
      [ -z "$ms" ] || torch_ms[k]=$(min "$ms" "${torch_ms[k]}")
    done
  done
  if [ "${loss[0]}" != "${loss[1]}" ]; then
    echo "FAILED: $shape: loss ${loss[0]} without checkpointing, ${loss[1]} with" >&2
    status=1
  fi
  rows+=("$(printf '%-24s %9s %9s %7s %9s %9s %7s %11s %11s %6s' "$(shape_label "$shape")" \
    "${zerodl_ms[0]}" "${zerodl_ms[1]}" "$(ratio "${zerodl_ms[1]}" "${zerodl_ms[0]}")" \
    "${torch_ms[0]:--}" "${torch_ms[1]:--}" "$(ratio "${torch_ms[1]}" "${torch_ms[0]}")" \
    "$(mib "${peak[0]}")" "$(mib "${peak[1]}")" "$(ratio "${peak[1]}" "${peak[0]}")")")
done
printf '\n%-24s %9s %9s %7s %9s %9s %7s %11s %11s %6s\n' "shape (step ms)" zerodl "+ckpt" cost torch "+ckpt" cost \
  "act MiB" "+ckpt" ratio
printf '%s\n' "${rows[@]}"
echo "cost = step time with every block checkpointed / without; act = zerodl's activation peak per step (ledger)"
exit $status

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
echo "CPU: $cpu_desc; $OMP_NUM_THREADS threads; peer: ${torch_desc:-none}"

if [ $# -gt 0 ]; then shapes=("$*"); else
  shapes=("--layers 4 --heads 4 --embd 256 --seq 128 --batch 8" "--layers 6 --heads 6 --embd 384 --seq 256 --batch 4")
fi
field() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
min() { awk -v a="$1" -v b="$2" 'BEGIN { print (b == "" || a + 0 < b + 0) ? a : b }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf (a != "" && b > 0 ? "%.2f" : "-"), a / b }'; }

rows=()
status=0
for shape in "${shapes[@]}"; do
  z0="" z1="" t0="" t1="" loss0="" loss1="" peak0="" peak1=""
  for _ in $(seq "$rounds"); do
    for k in 0 1; do
      # shellcheck disable=SC2086
      out=$("$build/bench/train_step_bench" $shape --checkpoint $k)
      ms=$(field "$out" step_ms)
      if [ $k = 0 ]; then z0=$(min "$ms" "$z0") loss0=$(field "$out" loss) peak0=$(field "$out" activation_peak)
      else z1=$(min "$ms" "$z1") loss1=$(field "$out" loss) peak1=$(field "$out" activation_peak); fi
      if [ -n "$torch_py" ]; then
        # shellcheck disable=SC2086
        tout=$("$torch_py" "$root/bench/torch_train_step.py" --threads "$OMP_NUM_THREADS" --checkpoint $k $shape 2>/dev/null) || tout=""
        tms=$(field "$tout" step_ms)
        if [ -n "$tms" ]; then
          if [ $k = 0 ]; then t0=$(min "$tms" "$t0"); else t1=$(min "$tms" "$t1"); fi
        fi
      fi
    done
  done
  if [ "$loss0" != "$loss1" ]; then
    echo "FAILED: $shape: loss $loss0 without checkpointing, $loss1 with" >&2
    status=1
  fi
  label=$(echo "$shape" | awk '{ for (i = 1; i < NF; i += 2) { k = $i; sub(/^--/, "", k)
    l = l sprintf("%s%s ", (k == "layers" ? "L" : k == "heads" ? "H" : k == "embd" ? "C" : k == "seq" ? "T" : k == "batch" ? "B" : k "="), $(i + 1)) }
    print l }')
  rows+=("$(printf '%-24s %9s %9s %7s %9s %9s %7s %11s %11s %6s' "$label" "$z0" "$z1" "$(ratio "$z1" "$z0")" \
    "${t0:--}" "${t1:--}" "$(ratio "$t1" "$t0")" "$(awk -v b="$peak0" 'BEGIN { printf "%.1f", b / 1048576 }')" \
    "$(awk -v b="$peak1" 'BEGIN { printf "%.1f", b / 1048576 }')" "$(ratio "$peak1" "$peak0")")")
done
printf '\n%-24s %9s %9s %7s %9s %9s %7s %11s %11s %6s\n' "shape (step ms)" zerodl "+ckpt" cost torch "+ckpt" cost \
  "act MiB" "+ckpt" ratio
printf '%s\n' "${rows[@]}"
echo "cost = step time with every block checkpointed / without; act = zerodl's activation peak per step (ledger)"
exit $status

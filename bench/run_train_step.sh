#!/usr/bin/env bash
# Training tokens/s of a small GPT on the CPU (f32, vocabulary 256, 2 threads): zerodl next to
# PyTorch eager (SDPA, fused AdamW) and torch.compile, same run, same machine, same threads.
#   bash bench/run_train_step.sh [BUILD_DIR] [--layers 4 --embd 256 ...]
# Without shape flags it measures two shapes: L4 H4 C256 T128 B8, and nanoGPT's shakespeare-char
# shape L6 H6 C384 T256 B4. The peer is PyPI's torch from bench/setup_torch_venv.sh where
# installed (else Debian's 1.13, eager only). The ratio is zerodl over the better torch mode.
# Where the CPU has AVX512-BF16 each shape is measured in bf16 too: zerodl's mixed precision
# (train_step_bench --dtype bf16) next to torch's autocast to bfloat16 (DTYPES=f32 to skip it).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
shift || true
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
source "$root/bench/torch_peer.sh"
source "$root/bench/result_fields.sh"
echo "CPU: $cpu_desc; $OMP_NUM_THREADS threads; peer: ${torch_desc:-none}"

if [ $# -gt 0 ]; then shapes=("$*"); else
  shapes=("--layers 4 --heads 4 --embd 256 --seq 128 --batch 8" "--layers 6 --heads 6 --embd 384 --seq 256 --batch 4")
fi
modes=(eager)
if [ -n "$torch_py" ] && "$torch_py" -c "import torch, sys; sys.exit(0 if hasattr(torch, 'compile') else 1)"; then
  modes+=(compile)
fi

dtypes=(${DTYPES:-f32 bf16})
if ! grep -qw avx512_bf16 /proc/cpuinfo 2>/dev/null; then dtypes=(f32); fi

# ROUNDS=N repeats every measurement N times, alternating the two sides, and keeps each cell's
# best: on a shared machine other load only ever slows a run down.
rounds=${ROUNDS:-1}
declare -A tok  # [side|dtype|shape] -> best tokens/s
keep() {  # keep KEY VALUE: the cell's best so far; each measurement is printed as it comes (a run cut
  # short still shows what it measured)
  local v=$2 side dt sh
  IFS='|' read -r side dt sh <<<"$1"
  echo "  measured $side $dt $(shape_label "$sh"): ${v:-failed} tokens/s"
  [ -n "$v" ] && { [ -z "${tok[$1]:-}" ] || [ "$v" -gt "${tok[$1]}" ]; } && tok[$1]=$v
  return 0
}
for ((round = 0; round < rounds; round++)); do
  for dtype in "${dtypes[@]}"; do
    for shape in "${shapes[@]}"; do
      # shellcheck disable=SC2086
      keep "zerodl|$dtype|$shape" "$(field "$("$build/bench/train_step_bench" $shape --dtype "$dtype")" tokens_per_s)"
      [ -n "$torch_py" ] || continue
      for m in "${modes[@]}"; do
        # shellcheck disable=SC2086
        t=$("$torch_py" "$root/bench/torch_train_step.py" --threads "$OMP_NUM_THREADS" --mode "$m" --dtype "$dtype" \
          $shape 2>/dev/null) || t=""
        keep "$m|$dtype|$shape" "$(field "$t" tokens_per_s)"
      done
    done
  done
done

rows=()
for dtype in "${dtypes[@]}"; do
  for shape in "${shapes[@]}"; do
    zt=${tok["zerodl|$dtype|$shape"]:-}
    best=0
    cells=()
    for m in "${modes[@]}"; do
      v=${tok["$m|$dtype|$shape"]:-}
      cells+=("${v:--}")
      if [ -n "$v" ] && [ "$v" -gt "$best" ]; then best=$v; fi
    done
    ratio=$(awk -v a="$zt" -v b="$best" 'BEGIN { printf (a > 0 && b > 0 ? "%.2f" : "-"), a / b }')
    label="$(shape_label "$shape") $dtype"
    rows+=("$(printf '%-29s %10s %10s %10s %8s' "$label" "${zt:--}" "${cells[0]}" "${cells[1]:--}" "$ratio")")
  done
done
printf '\n%-29s %10s %10s %10s %8s\n' "shape dtype (tokens/s)" zerodl "torch" "compile" "z/best"
printf '%s\n' "${rows[@]}"

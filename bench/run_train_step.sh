#!/usr/bin/env bash
# Training tokens/s of a small GPT on the CPU (f32, vocabulary 256, 2 threads): zerodl next to
# PyTorch eager (SDPA, fused AdamW) and torch.compile, same run, same machine, same threads.
#   bash bench/run_train_step.sh [BUILD_DIR] [--layers 4 --embd 256 ...]
# Without shape flags it measures two shapes: L4 H4 C256 T128 B8, and nanoGPT's shakespeare-char
# shape L6 H6 C384 T256 B4. The peer is PyPI's torch from bench/setup_torch_venv.sh where
# installed (else Debian's 1.13, eager only). The ratio is zerodl over the better torch mode.
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

rows=()
for shape in "${shapes[@]}"; do
  # shellcheck disable=SC2086
  z=$("$build/bench/train_step_bench" $shape)
  best=0 best_mode="-"
  cells=()
  for m in "${modes[@]}"; do
    t=""
    if [ -n "$torch_py" ]; then
      # shellcheck disable=SC2086
      t=$("$torch_py" "$root/bench/torch_train_step.py" --threads "$OMP_NUM_THREADS" --mode "$m" $shape 2>/dev/null) || t=""
    fi
    v=$(field "$t" tokens_per_s)
    cells+=("${v:--}")
    if [ -n "$v" ] && [ "$v" -gt "$best" ]; then best=$v best_mode=$m; fi
  done
  zt=$(field "$z" tokens_per_s)
  ratio=$(awk -v a="$zt" -v b="$best" 'BEGIN { printf (b > 0 ? "%.2f" : "-"), a / b }')
  label=$(shape_label "$shape")
  rows+=("$(printf '%-24s %10s %10s %10s %8s' "$label" "$zt" "${cells[0]}" "${cells[1]:--}" "$ratio")")
done
printf '\n%-24s %10s %10s %10s %8s\n' "shape (tokens/s)" zerodl "torch" "compile" "z/best"
printf '%s\n' "${rows[@]}"

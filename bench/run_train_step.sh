#!/usr/bin/env bash
# Training tokens/s of a fixed small GPT (default L=4, H=4, C=256, T=128, B=8, f32, 2 threads):
# zerodl next to PyTorch, same run, same machine. Extra args go to both programs.
#   bash bench/run_train_step.sh [BUILD_DIR] [--layers 4 --embd 256 ...]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
shift || true
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
z=$("$build/bench/train_step_bench" "$@")
echo "$z"
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
  t=$(/usr/bin/python3 "$root/bench/torch_train_step.py" --threads "$OMP_NUM_THREADS" "$@")
  echo "$t"
else
  t=""
  echo "(python3-torch not installed: no peer measured)"
fi
field() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
printf '\n%-8s %12s %12s %14s\n' impl params step_ms tokens/s
printf '%-8s %12s %12s %14s\n' zerodl "$(field "$z" params)" "$(field "$z" step_ms)" "$(field "$z" tokens_per_s)"
if [ -n "$t" ]; then
  printf '%-8s %12s %12s %14s\n' torch "$(field "$t" params)" "$(field "$t" step_ms)" "$(field "$t" tokens_per_s)"
  awk -v a="$(field "$z" tokens_per_s)" -v b="$(field "$t" tokens_per_s)" \
    'BEGIN { printf "ratio zerodl/torch tokens/s: %.2fx\n", a / b }'
fi

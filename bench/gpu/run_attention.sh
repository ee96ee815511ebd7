#!/usr/bin/env bash
# Causal attention on one GPU, A/B: cuDNN's fused flash attention against zerodl's own CUDA
# kernels (ZDL_CUDNN_ATTENTION=0), bf16, forward and forward + backward at GPT-2 124M's shape
# (B=16, NH=12, T=1024, HS=64), HS=128 and T=4096, with how far apart the two paths' results
# are (bench/gpu/attention_bench.cpp). Under a minute; also run by scripts/gpu_check.sh's attention stage,
# whose table shows the last line ("summary: ...").
#
#   bash bench/gpu/run_attention.sh [BUILD_DIR]      # default build-gpu; ZDL_BENCH_REPS (20)
#
# Exit status: 0 when it measured, and also when there is no GPU or the build has no cuDNN path
# (it says so); 1 when the benchmark failed.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$root/build-gpu}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
exe="$build/bench/cuda_attention_bench"

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q "^GPU"; then
  echo "run_attention: no GPU visible (nvidia-smi lists none): nothing measured"
  exit 0
fi
if [ ! -x "$exe" ]; then
  if grep -qs "ZDL_WITH_CUDNN_FRONTEND" "$build/build.ninja" "$build/CMakeFiles/zdl.dir/flags.make"; then
    echo "run_attention: no $exe (build it: cmake --build $build --target cuda_attention_bench)"
    exit 1
  fi
  echo "run_attention: $build has no cuDNN attention (its configure output says why): nothing to compare"
  exit 0
fi
"$exe" "${ZDL_BENCH_REPS:-20}"

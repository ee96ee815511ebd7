#!/usr/bin/env bash
# The test command (README, .ci/run): set up, build, run every CPU test.
#   1. CPU-only build (-DZDL_CUDA=OFF): all tests, multi-rank ones under mpirun, from ctest.
#   2. CUDA build when a toolkit is present: compiles and links every CUDA source, then runs
#      the GPU tests, which skip cleanly on a machine without a GPU and run on one with.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/setup.sh

# OpenMPI refuses root and oversubscription unless told; MPICH ignores these.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"

start=$(date +%s)
echo "== CPU build =="
bash scripts/build.sh "$root/build-cpu" -DZDL_CUDA=OFF
echo "== CPU tests =="
ctest --test-dir "$root/build-cpu" --output-on-failure -j1 --timeout 900

if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  # The library (every CUDA source), the programs and the GPU-facing tests: everything that
  # links CUDA; the CPU-only test binaries were built and run above.
  echo "== CUDA build (compile + link) =="
  ZDL_TARGETS="zdl train_gpt test_cuda test_dist" bash scripts/build.sh "$root/build-cuda" -DZDL_CUDA=ON
  echo "== GPU tests (skip without a GPU) =="
  ctest --test-dir "$root/build-cuda" --output-on-failure -L "test_cuda|test_dist" --timeout 900
fi
echo "test.sh: done in $(( $(date +%s) - start )) s"

#!/usr/bin/env bash
# Installs what a fresh Debian/Ubuntu machine lacks to build and test zerodl. Idempotent:
# packages already present are not touched, and apt-get runs only when something is missing.
# The CUDA toolkit (with cuBLAS, cuDNN, NCCL) is not installed here: it is used where the
# machine has it (nvcc on PATH or /usr/local/cuda), and the CUDA backend is skipped otherwise.
set -euo pipefail

#   scripts/setup.sh          everything: the build, the tests, the references and the pictures
#   scripts/setup.sh --main   only what building and running train_gpt needs (the main command)
packages=(
  build-essential cmake ninja-build pkg-config git
  clang libomp-dev       # preferred compiler: Eigen's GEMM runs ~1.4x faster built by clang 14 than by g++ 12
  libeigen3-dev          # CPU kernels
  libdnnl-dev            # oneDNN: f32 GEMM 5-10% faster than Eigen's (cmake/ZdlOneDnn.cmake)
  mpich libmpich-dev     # collectives on CPU, launcher (mpirun)
  ccache                 # rebuilds of unchanged sources are cache hits (scripts/build.sh)
  libcli11-dev nlohmann-json3-dev
)
if [ "${1:-}" != "--main" ]; then
  packages+=(
    libclang-rt-dev llvm   # sanitizer and libFuzzer runtimes, llvm-symbolizer for their stacks (test.sh)
    googletest libgtest-dev libgmock-dev
    python3 python3-numpy python3-torch libopenblas0-pthread  # reference for tests and benchmarks
    python3-matplotlib     # the walkthrough's pictures (scripts/plot_walkthrough.py)
    python3-pip            # fetches the cuDNN frontend's headers (scripts/fetch_cudnn_frontend.sh)
    python3-regex          # GPT-2's encoder.py, the BPE tokenizer's reference (tests/data/bpe_tokenizer_test.cpp)
  )
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "setup: all packages present"
fi

if [ "${1:-}" = "--main" ]; then
  :  # run_main.sh decides on CUDA from the GPUs it can see
elif command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: CUDA toolkit found: the CUDA backend will be built"
  bash "$(dirname "$0")/fetch_cudnn_frontend.sh"  # cuDNN attention's headers, into third_party/
else
  echo "setup: no CUDA toolkit: building the CPU backend only"
fi

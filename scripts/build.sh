#!/usr/bin/env bash
# Configures and builds zerodl into a build folder.
#   scripts/build.sh [BUILD_DIR] [extra cmake args...]     (default: build/, CUDA auto-detected)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
shift || true
export PATH="$PATH:/usr/local/cuda/bin"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >"$build.configure.log" 2>&1 ||
  { cat "$build.configure.log"; exit 1; }
grep -E "zerodl:" "$build.configure.log" || true
ninja -C "$build" -j"$(nproc)"

#!/usr/bin/env bash
# Configures and builds zerodl into a build folder.
#   scripts/build.sh [BUILD_DIR] [extra cmake args...]     (default: build/, CUDA auto-detected)
#   ZDL_TARGETS="zdl test_cuda" scripts/build.sh ...       builds only those targets
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
shift || true
export PATH="$PATH:/usr/local/cuda/bin"
# clang++ when present (see scripts/setup.sh); nvcc keeps its default host compiler (g++).
compiler=()
if [ -z "${CXX:-}" ] && command -v clang++ >/dev/null 2>&1 && [ ! -f "$build/CMakeCache.txt" ]; then
  compiler=(-DCMAKE_CXX_COMPILER=clang++)
fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${compiler[@]}" "$@" >"$build.configure.log" 2>&1 ||
  { cat "$build.configure.log"; exit 1; }
grep -E "zerodl:" "$build.configure.log" || true
# shellcheck disable=SC2086
ninja -C "$build" -j"$(nproc)" ${ZDL_TARGETS:-}

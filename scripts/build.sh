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
# ccache where installed (scripts/setup.sh): a rebuild of unchanged sources, in any checkout of
# the tree (paths are taken relative to it), is a cache hit.
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=true
fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${compiler[@]}" "${launcher[@]}" "$@" >"$build.configure.log" 2>&1 ||
  { cat "$build.configure.log"; exit 1; }
grep -E "zerodl:" "$build.configure.log" || true
# shellcheck disable=SC2086
ninja -C "$build" -j"$(nproc)" ${ZDL_TARGETS:-}

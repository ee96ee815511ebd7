#!/usr/bin/env bash
# Where one CPU training step's time goes, by op family, zerodl next to PyTorch (issue: close the
# gap where the profile says). zerodl: perf's samples of bench/train_step_bench; PyTorch: its
# profiler, same model, shape and threads (bench/profile_train_step.py).
#   bash bench/profile_train_step.sh [BUILD_DIR] [--layers 4 --embd 256 ...]   (needs perf: linux-perf)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
shift || true
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
source "$root/bench/torch_peer.sh"
command -v perf >/dev/null || { echo "profile_train_step: needs perf (apt-get install linux-perf)" >&2; exit 1; }
[ -n "$torch_py" ] || { echo "profile_train_step: needs PyTorch (bash bench/setup_torch_venv.sh)" >&2; exit 1; }
echo "CPU: $cpu_desc; $OMP_NUM_THREADS threads; peer: $torch_desc; shape: ${*:-default (L4 H4 C256 T128 B8)}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
z=$(perf record -q -F 499 --call-graph dwarf,8192 -o "$tmp/perf.data" "$build/bench/train_step_bench" "$@" --steps 20 2>/dev/null)
echo "$z"
ms=$(echo "$z" | tr ' ' '\n' | sed -n 's/^step_ms=//p')
(cd "$root/bench" && "$torch_py" profile_train_step.py "$tmp/perf.data" "$ms" --threads "$OMP_NUM_THREADS" "$@")

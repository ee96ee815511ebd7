#!/usr/bin/env bash
# ZeRO-3 with NVMe offload, zerodl next to DeepSpeed's ZeRO-Infinity, in one run on one CPU:
#   bash bench/run_offload.sh [BUILD_DIR]        RANKS=2 DTYPE=f32 DIR=/scratch/x STEPS=8 WINDOW_MIB=0
# zerodl: build/bench/offload_bench (direct I/O), modes none / optimizer / optimizer+params, and
# with WINDOW_MIB > 0 both offload modes again with that optimizer window (--offload-window-mib).
# DeepSpeed: bench/deepspeed_offload.py (the same GPT, batch and steps), modes none / nvme, when
# the venv of bench/setup_torch_venv.sh has deepspeed (`.venv-torch/bin/pip install deepspeed`;
# nvme also needs libaio-dev); otherwise the table says why it has no DeepSpeed column.
# Prints both tables, then one line per mode with each step time over its own no-offload step,
# and zerodl's over DeepSpeed's.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
ranks="${RANKS:-2}" dtype="${DTYPE:-f32}" steps="${STEPS:-8}" window="${WINDOW_MIB:-0}"
dir="${DIR:-$(mktemp -d "${TMPDIR:-/tmp}/zdl-offload-bench.XXXXXX")}"
mkdir -p "$dir/zerodl" "$dir/deepspeed"
source "$root/bench/torch_peer.sh"
[ -x "$build/bench/offload_bench" ] || { echo "run_offload: no $build/bench/offload_bench (build first)" >&2; exit 2; }
echo "CPU: $cpu_desc; $ranks ranks of 1 thread, $dtype, scratch in $dir"

z=$(OMP_NUM_THREADS=1 mpirun -n "$ranks" "$build/bench/offload_bench" --dir "$dir/zerodl" --dtype "$dtype" \
      --steps "$steps" --window-mib "$window" 2>&1) || { echo "$z"; exit 1; }
echo "$z"
# The step ms of the row whose mode is exactly $1 (mode names may hold ", ").
zms() { awk -v m="$1" 'index($0, m " ") == 1 { split(substr($0, length(m) + 1), f, " "); if (f[1] ~ /^[0-9.]+$/) print f[1] }' <<<"$z"; }

ds="" ds_why=""
if [ -n "$torch_py" ] && "$torch_py" -c "import deepspeed" 2>/dev/null; then
  ds=$("$torch_py" "$root/bench/deepspeed_offload.py" --dir "$dir/deepspeed" --ranks "$ranks" --dtype "$dtype" \
        --steps "$steps" --modes none,nvme 2>&1 | grep -E "^(cpu:|torch |deepspeed |DeepSpeed)") || true
  echo "$ds"
else
  ds_why="deepspeed is not installed in ${torch_py:-a torch venv} (bench/setup_torch_venv.sh, then pip install deepspeed)"
fi
dms() { sed -n "s/^deepspeed mode=$1 .*step_ms=\([0-9.]*\).*/\1/p" <<<"$ds"; }

echo
printf "%-34s %12s %12s %14s\n" "ZeRO-3 step ($ranks ranks, $dtype)" "zerodl ms" "DeepSpeed ms" "zerodl / DS"
row() {  # label, zerodl mode, DeepSpeed mode
  local a b r="-"
  a=$(zms "$2"); b=$([ -n "$3" ] && dms "$3" || true)
  [ -n "$a" ] && [ -n "$b" ] && r=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2fx", a / b }')
  printf "%-34s %12s %12s %14s\n" "$1" "${a:--}" "${b:--}" "$r"
}
row "no offload" none none
row "optimizer states on NVMe" optimizer nvme
row "optimizer + parameters on NVMe" optimizer+params ""
if awk -v w="$window" 'BEGIN { exit !(w > 0) }'; then
  row "optimizer on NVMe, ${window} MiB window" "optimizer, window" ""
  row "optimizer + params, ${window} MiB window" "optimizer+params, window" ""
fi
[ -z "$ds_why" ] || echo "DeepSpeed: not measured: $ds_why"
if [ -n "$ds" ]; then
  echo "DeepSpeed's nvme mode offloads both, but swaps a parameter partition only from 1 MiB (its"
  echo "nvme_params count above): at this size its parameters stay in memory, so its row is next to"
  echo "zerodl's optimizer-only mode."
fi

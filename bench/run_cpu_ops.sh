#!/usr/bin/env bash
# Runs the zerodl CPU ops benchmark and its PyTorch twin in the same run and prints
#   op  size  zerodl GFLOP/s  torch GFLOP/s  ratio (zerodl / torch)
# Builds nothing: pass the build directory holding bench/cpu_ops_bench.
#
#   bench/run_cpu_ops.sh build [threads=2] [sizes=256,512,1024,2048]
#   ROUNDS=3 bench/run_cpu_ops.sh build   # on a shared box: best of 3 rounds per side
set -euo pipefail

build=${1:?usage: $0 BUILD_DIR [threads] [sizes]}
threads=${2:-2}
sizes=${3:-256,512,1024,2048}
here=$(cd "$(dirname "$0")" && pwd)
bin="$build/bench/cpu_ops_bench"
[[ -x "$bin" ]] || { echo "error: $bin not found; build it with: ninja -C $build cpu_ops_bench" >&2; exit 1; }

# Both sides get the same thread count (PyPI's torch uses MKL for GEMM, Debian's 1.13 OpenBLAS).
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads MKL_NUM_THREADS=$threads
source "$here/torch_peer.sh"
echo "# CPU: $cpu_desc"

# One size at a time, zerodl then torch, so both see the same machine load (a shared box
# drifts over a minute; interleaving keeps the ratio honest even when absolute numbers move).
# Each run reports a median; across ROUNDS the best median per side is kept, since other
# load on the machine can only slow a run down.
rounds=${ROUNDS:-1}
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for ((round = 0; round < rounds; round++)); do
  for size in ${sizes//,/ }; do
    "$bin" "$threads" "$size" >>"$results"
    [ -z "$torch_py" ] || "$torch_py" "$here/torch_cpu_ops.py" "$threads" "$size" >>"$results"
  done
done
grep '^#' "$results" | sort -u

awk '
  $1 == "RESULT" {
    if (!(($2, $3, $4) in g) || $5 + 0 > g[$2, $3, $4] + 0) g[$2, $3, $4] = $5
    if (!($3 in seen_op)) { seen_op[$3] = 1; ops[nops++] = $3 }
    if (!(($3, $4) in seen)) { seen[$3, $4] = 1; sizes[$3, cnt[$3]++] = $4 }
  }
  END {
    printf "%-18s %6s %16s %15s %7s\n", "op", "size", "zerodl GFLOP/s", "torch GFLOP/s", "ratio"
    for (i = 0; i < nops; i++)
      for (j = 0; j < cnt[ops[i]]; j++) {
        # "matmul/eigen" (zerodl on Eigen, beside its default oneDNN) is compared with torch matmul
        op = ops[i]; sz = sizes[op, j]; base = op; sub(/\/.*/, "", base)
        z = g["zerodl", op, sz]; t = g["torch", base, sz]
        r = (z != "" && t != "" && t > 0) ? sprintf("%.2f", z / t) : "-"
        printf "%-18s %6s %16s %15s %7s\n", op, sz, (z == "" ? "-" : z), (t == "" ? "-" : t), r
      }
  }' "$results"

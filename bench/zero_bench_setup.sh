# Shared setup of the multi-rank CPU benchmarks (run_zero_stages.sh, run_exact_vs_native.sh,
# run_side_by_side.sh),
# sourced with the script's arguments:  source "$(dirname "$0")/zero_bench_setup.sh" "$@"
# Sets root, build (first argument, default build/), ranks (the rest, default 2 4), the MPI
# environment, the model (L=4, H=4, C=128, T=64, batch 8, f32), steps and warm-up steps, a
# temporary folder removed at exit, and threads (this machine's cores).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
shift || true
if [ $# -gt 0 ]; then ranks=("$@"); else ranks=(2 4); fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# The launcher, with flags a host needs (ZDL_MPIRUN="mpirun -launcher fork" where MPICH must
# start its ranks by fork: scripts/gpu_check.sh's cpu stage).
read -ra mpirun <<<"${ZDL_MPIRUN:-mpirun}"
model=(--n-layer 4 --n-head 4 --n-embd 128 --seq 64 --batch 8)
steps=15 warm=3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
threads=$(nproc)

#!/usr/bin/env bash
# The main command (README): set up, build, and train a small GPT with ZeRO-3 on 4 ranks
# (MPI processes on this machine) on the embedded corpus, then print a sample.
#   bash scripts/run_main.sh [extra train_gpt flags]      e.g. --steps 1000 --zero-stage 2
# Ranks: ZDL_RANKS (default 4).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
bash scripts/build.sh "$root/build"
# OpenMPI refuses root and oversubscription unless told; MPICH ignores these.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
mpirun -np "${ZDL_RANKS:-4}" "$root/build/examples/train_gpt" --zero-stage 3 --steps 400 --eval-every 100 \
  --sample 400 "$@"

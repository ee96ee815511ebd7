#!/usr/bin/env bash
# The main command (README): set up, build, and train a small GPT with ZeRO-3 on the embedded
# corpus, then print a sample: on 4 CPU ranks (MPI processes on this machine), or on a machine
# with GPUs one rank per GPU.
#   bash scripts/run_main.sh [extra train_gpt flags]      e.g. --steps 1000 --zero-stage 2
# Ranks: ZDL_RANKS (default 4, or the GPU count).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/setup.sh --main
# Only what the job needs: the library and train_gpt, without the tests; the CUDA backend only
# where a GPU is visible (a toolkit alone cannot run it). `bash scripts/test.sh` builds the rest.
cuda=OFF
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q "^GPU"; then cuda=ON; fi
ZDL_TARGETS="train_gpt" bash scripts/build.sh "$root/build" -DZDL_CUDA="$cuda" -DZDL_BUILD_TESTS=OFF
# OpenMPI refuses root and oversubscription unless told; MPICH ignores these.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# On a GPU box: one rank per GPU, on the GPUs; elsewhere 4 CPU ranks.
device=(--device cpu)
ranks=4
if [ "$cuda" = ON ]; then
  device=(--device cuda)
  ranks=$(nvidia-smi -L | grep -c "^GPU")
fi
mpirun -np "${ZDL_RANKS:-$ranks}" "$root/build/examples/train_gpt" "${device[@]}" --zero-stage 3 --steps 400 \
  --eval-every 100 --sample 400 "$@"
echo "next: 'bash scripts/build.sh' builds the other programs into build/ (the ZeRO walkthrough: README, 'Learn ZeRO')"

#!/usr/bin/env bash
# Installs today's PyTorch from PyPI into a virtual environment, for the benchmarks only (the
# peer the speed tables compare against: MKL GEMM, fused SDPA, torch.compile, FSDP2 on gloo).
# Neither the tests nor the main command need it. Idempotent: an environment that already
# imports torch is left as it is.
#   bench/setup_torch_venv.sh [DIR]     DIR defaults to $ZDL_TORCH_VENV or .venv-torch/
# Prints the environment's python on its last line, for  py=$(bench/setup_torch_venv.sh | tail -1).
# PyPI's Linux wheel pulls NVIDIA's CUDA libraries with it (a few GB); it runs on CPUs as well.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${1:-${ZDL_TORCH_VENV:-$root/.venv-torch}}"
py="$venv/bin/python"

if [ -x "$py" ] && "$py" -c "import torch" 2>/dev/null; then
  echo "setup_torch_venv: torch $("$py" -c 'import torch; print(torch.__version__)') already in $venv" >&2
  echo "$py"
  exit 0
fi

# Debian's python3 needs python3-venv (ensurepip) to make environments.
if ! python3 -c "import ensurepip" 2>/dev/null; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
fi
echo "setup_torch_venv: creating $venv and installing torch from PyPI (a few GB, several minutes)" >&2
python3 -m venv "$venv"
"$py" -m pip install -q --upgrade pip >&2
# numpy for the scripts' arrays, safetensors to read zerodl's exported checkpoints.
"$py" -m pip install -q torch numpy safetensors >&2
echo "setup_torch_venv: torch $("$py" -c 'import torch; print(torch.__version__)') in $venv" >&2
echo "$py"

# The PyTorch the benchmarks compare against, sourced by bench/run_*.sh: sets torch_py to
# today's PyTorch from PyPI in the venv of bench/setup_torch_venv.sh (MKL GEMM, fused SDPA,
# torch.compile) when there is one, else Debian's python3-torch (1.13, OpenBLAS; an older peer,
# named as such in the output), else the python3 on PATH that has torch, else empty (no peer measured). torch_desc says which.
torch_py="" torch_desc=""
_venv_py="${ZDL_TORCH_VENV:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.venv-torch}/bin/python"
for _py in "$_venv_py" /usr/bin/python3 "$(command -v python3)"; do
  if [ -x "$_py" ] && _v=$("$_py" -c "import torch; print(torch.__version__)" 2>/dev/null); then
    torch_py="$_py" torch_desc="torch $_v ($_py)"
    break
  fi
done
[ -n "$torch_py" ] || echo "(no PyTorch found: bash bench/setup_torch_venv.sh installs the peer; no peer measured)" >&2
# The CPU the numbers come from (benchmarks are only comparable on the same one).
cpu_desc="$(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores; $(grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"

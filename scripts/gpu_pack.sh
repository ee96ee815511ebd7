#!/usr/bin/env bash
# Packs a CUDA build made on this machine for a GPU host that has the NVIDIA driver, the CUDA
# libraries (cuBLAS, cuDNN, NCCL: the toolkit's or PyTorch's pip wheels) and python3, but no MPI,
# no Debian -dev packages and no time to build: the programs are built here (sm_90, no -march=
# native, so they run on any x86-64 host CPU) and scripts/gpu_check.sh runs them there.
#
#   bash scripts/gpu_pack.sh [BUILD_DIR] [CARRY_DIR]    (defaults: build-gpu-pack, .device/carry)
#
# BUILD_DIR is configured and (re)built (ZDL_PACK_REBUILD=0: used as it is). CARRY_DIR gets:
#   build/{examples,tests,bench}/...  the stripped programs, laid out as in a build folder, so the
#                                     bench scripts take CARRY_DIR/build as their BUILD_DIR
#   cpu/bench/train_step_bench        the CPU training benchmark built for AVX-512 (x86-64-v4) with
#   cpu/examples/train_gpt, consolidate_checkpoint
#                                     oneDNN, in build-cpu-v4 (ZDL_PACK_CPU=0: left out): gpu_check's
#                                     cpu stage measures the GPU host's CPU next to PyTorch, one rank
#                                     and several
#   bin/mpiexec.hydra, hydra_pmi_proxy  MPICH's launcher (bin/mpirun and bin/mpiexec link to it)
#   lib/                              every shared library the programs load that is neither the
#                                     C/C++ runtime nor a CUDA library (MPICH, UCX, hwloc, ...)
# and CARRY_DIR.tar.xz holds the folder compressed (about 15 MiB: what is copied to the GPU host;
# scripts/gpu_check.sh unpacks it there).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build-gpu-pack}"
carry="${2:-$root/.device/carry}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
case "$carry" in /*) ;; *) carry="$root/$carry" ;; esac

programs=(examples/train_gpt tests/test_cuda tests/test_dist tests/test_dist_mpi bench/cuda_attention_bench)
targets="zdl train_gpt test_cuda test_dist test_dist_mpi cuda_attention_bench"
if [ ! -f "$build/build.ninja" ] || [ "${ZDL_PACK_REBUILD:-1}" = 1 ]; then
  ZDL_TARGETS="$targets" bash "$root/scripts/build.sh" "$build" -DZDL_CUDA=ON -DZDL_NATIVE=OFF \
    -DZDL_ONEDNN=OFF -DCMAKE_CUDA_ARCHITECTURES="${ZDL_CUDA_ARCH:-90}"
fi

cpu_build="$root/build-cpu-v4"
if [ "${ZDL_PACK_CPU:-1}" = 1 ] && { [ ! -f "$cpu_build/build.ninja" ] || [ "${ZDL_PACK_REBUILD:-1}" = 1 ]; }; then
  # No -march=native: this machine's CPU is not the GPU host's. The GEMM picks its AVX2 or AVX-512
  # instance at run time; the rest is compiled for AVX-512.
  ZDL_TARGETS="train_step_bench train_gpt consolidate_checkpoint" bash "$root/scripts/build.sh" "$cpu_build" \
    -DZDL_CUDA=OFF -DZDL_NATIVE=OFF \
    -DZDL_BUILD_TESTS=OFF -DCMAKE_CXX_FLAGS=-march=x86-64-v4
fi

rm -rf "$carry"
mkdir -p "$carry/bin" "$carry/lib"
carried=()
for p in "${programs[@]}"; do
  [ -x "$build/$p" ] || { echo "gpu_pack: $build/$p was not built" >&2; exit 1; }
  mkdir -p "$carry/build/$(dirname "$p")"
  strip --strip-debug -o "$carry/build/$p" "$build/$p"  # symbols kept: readable backtraces
  carried+=("$carry/build/$p")
done
if [ "${ZDL_PACK_CPU:-1}" = 1 ]; then
  for p in bench/train_step_bench examples/train_gpt examples/consolidate_checkpoint; do
    mkdir -p "$carry/cpu/$(dirname "$p")"
    strip --strip-debug -o "$carry/cpu/$p" "$cpu_build/$p"
    carried+=("$carry/cpu/$p")
  done
fi

# MPICH's hydra launcher: ranks start by fork on the GPU host (HYDRA_LAUNCHER=fork there).
hydra="$(readlink -f "$(command -v mpiexec.hydra || command -v mpiexec)")"
cp "$hydra" "$carry/bin/mpiexec.hydra"
cp "$(dirname "$hydra")/hydra_pmi_proxy" "$carry/bin/"
ln -s mpiexec.hydra "$carry/bin/mpiexec"
ln -s mpiexec.hydra "$carry/bin/mpirun"

# Shared libraries: everything ldd resolves except the C/C++ runtime (the host's is as new or
# newer) and the CUDA libraries (the host's must match its driver).
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|librt\.|libpthread\.|libresolv\.|libnss_|libutil\.|libanl\.|libstdc\+\+|libgcc_s|libcuda\.|libcudart|libcublas|libcudnn|libnccl|libnvrtc|libnvJitLink)'
for f in "${carried[@]}" "$carry"/bin/mpiexec.hydra "$carry"/bin/hydra_pmi_proxy; do
  ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  [[ "$name" =~ $skip ]] && continue
  cp -L "$path" "$carry/lib/$name"
done
# (UCX's optional transport modules are left out: its shared-memory and TCP transports are
# built in, and the ranks exchange host buffers on one machine.)
strip --strip-unneeded "$carry"/lib/*.so* 2>/dev/null || true
tar -C "$(dirname "$carry")" -cf - "$(basename "$carry")" | xz -T"$(nproc)" -6 >"$carry.tar.xz.tmp"
mv "$carry.tar.xz.tmp" "$carry.tar.xz"
echo "gpu_pack: $carry ($(du -sh "$carry" | cut -f1); $carry.tar.xz $(du -h "$carry.tar.xz" | cut -f1)), libraries: $(ls "$carry/lib" | tr '\n' ' ')"

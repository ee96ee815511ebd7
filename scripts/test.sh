#!/usr/bin/env bash
# The test command (README, .ci/run): set up, build, run every CPU test.
#   1. CPU-only build (-DZDL_CUDA=OFF): all tests, multi-rank ones under mpirun, from ctest;
#      then the library again with GCC, warnings as errors.
#   2. CUDA build when a toolkit is present: compiles and links every CUDA source, then runs
#      the GPU tests, which skip cleanly on a machine without a GPU and run on one with.
#   3. ASan+UBSan: the whole CPU suite again, built with -DZDL_SANITIZE=address,undefined.
#   4. TSan: the tests of the code that runs threads, built with -DZDL_SANITIZE=thread.
#   5. Fuzz: the libFuzzer targets (tests/fuzz/) for a bounded time from their seed corpora.
# Sanitized and fuzz builds compile at -O1 (cmake/ZdlOptions.cmake) and build CPU only.
# Each stage prints its duration; a table of all of them closes the run.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

start=$(date +%s)
timings=()
stage_name="" stage_t0=0
stage() {  # stage NAME: ends the running stage (if any) and starts NAME
  stage_end
  stage_name="$1" stage_t0=$(date +%s)
  echo "== $stage_name =="
}
stage_end() {
  [ -n "$stage_name" ] || return 0
  local d=$(( $(date +%s) - stage_t0 ))
  timings+=("$(printf '%-32s %5d s' "$stage_name" "$d")")
  echo "== $stage_name: ${d} s"
  stage_name=""
}

stage "setup"
bash scripts/setup.sh
# Setup installed every reference tool the tests compare against (torch, python3-regex,
# matplotlib, setpriv): a test that would skip for lack of one fails instead
# (tests/skip_unless_ci.h, tests/examples/skip_unless_ci.py).
export CI="${CI:-true}"

# OpenMPI refuses root and oversubscription unless told; MPICH ignores these.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
# The library's own settings, left in a developer's shell, would change what the tests see (a
# ZDL_RANKS_PER_NODE poses nodes in every one-process communicator, ZDL_CPU_GEMM another GEMM):
# the suite runs on the defaults. ZDL_MPIEXEC, which names the launcher, is kept.
unset ZDL_RANKS_PER_NODE ZDL_DIST_BACKEND ZDL_COLLECTIVE_TIMEOUT_S ZDL_SHARDED_XWS_DIR ZDL_CPU_GEMM \
  ZDL_CUDNN_ATTENTION ZDL_CUDA_SYNC_LAUNCHES ZDL_FUZZ_WRITE_SEEDS
# Clang 14's sanitizers cannot place their shadow memory where the kernel randomizes mmap with
# more than 28 bits (vm.mmap_rnd_bits, 32 on some recent kernels; newer LLVMs cope): there the
# sanitized stages (their builds run the test binaries too, to list the tests) run without
# address-space randomization.
sanitized=()
if [ "$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo 0)" -gt 28 ] && command -v setarch >/dev/null 2>&1; then
  sanitized=(setarch "$(uname -m)" -R)
  echo "test.sh: vm.mmap_rnd_bits > 28: the sanitized stages run under '${sanitized[*]}'"
fi

stage "CPU build"
bash scripts/build.sh "$root/build-cpu" -DZDL_CUDA=OFF
stage "CPU tests"
ctest --test-dir "$root/build-cpu" --output-on-failure -j1 --timeout 900

# The library with GCC, the default compiler of a user's project: its build log must stay clean
# (warnings are errors here; clang's build above uses the same -Wall -Wextra). It is built
# without oneDNN, so the Eigen-only configuration of the CPU GEMM compiles too.
stage "GCC build (library, -Werror)"
CXX=g++ ZDL_TARGETS="zdl" bash scripts/build.sh "$root/build-gcc" -DZDL_CUDA=OFF -DZDL_ONEDNN=OFF -DCMAKE_CXX_FLAGS=-Werror

if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  # The library (every CUDA source), the programs and the GPU-facing tests: everything that
  # links CUDA; the CPU-only test binaries were built and run above.
  stage "CUDA build (compile + link)"
  ZDL_TARGETS="zdl train_gpt test_cuda test_dist test_dist_mpi" bash scripts/build.sh "$root/build-cuda" -DZDL_CUDA=ON
  stage "GPU tests (skip without a GPU)"
  ctest --test-dir "$root/build-cuda" --output-on-failure -L "test_cuda|test_dist|gpu" --timeout 900
fi

# ---- ASan + UBSan: the whole CPU suite -------------------------------------------------------
# Every target (library, tests, programs) instrumented; every ctest test runs, the mpirun
# tests and the python-driven program tests included (their programs are instrumented; the
# options below reach them through the environment), except what checks only bits and bytes at
# larger sizes (walkthrough_doc_np4, dist_mpi_exact_np8, train_gpt_cli's 200-step drift runs:
# the same code runs smaller here; tests/CMakeLists.txt). The fuzz targets are not part of this
# build (ZDL_FUZZ=OFF), the CUDA tests skip in a CPU build, and the find_package project test
# is not registered (it checks packaging, and an instrumented library needs instrumented users).
#   ASan: stop at the first error; use-after-return and init-order checks on; LeakSanitizer
#   at exit of every process, with suppressions for third-party libraries only
#   (tests/sanitizers/lsan.supp). UBSan: the build already aborts on the first report
#   (-fno-sanitize-recover=undefined); print its stack.
# HWLOC_PLUGINS_BLACKLIST: MPICH's MPI_Init loads hwloc, which dlopens its PCI plugin; that
# plugin's libpciaccess leaks a few objects and is unloaded before LeakSanitizer runs, so the
# leak's frames can no longer be named (or suppressed by library). PCI topology only places
# GPUs and NICs, which a CPU test run does not use; without the plugin the leak never happens.
stage "ASan+UBSan build"
"${sanitized[@]}" bash scripts/build.sh "$root/build-asan" -DZDL_CUDA=OFF -DZDL_SANITIZE=address,undefined
stage "ASan+UBSan tests"
ASAN_OPTIONS="halt_on_error=1:abort_on_error=0:detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1" \
UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" \
LSAN_OPTIONS="suppressions=$root/tests/sanitizers/lsan.supp:print_suppressions=0" \
HWLOC_PLUGINS_BLACKLIST=hwloc_pci \
  "${sanitized[@]}" ctest --test-dir "$root/build-asan" --output-on-failure -j1 --timeout 900

# ---- TSan: the code that runs threads ----------------------------------------------------------
# Threads live in dist/: the MPI backend's communication thread and the watchdog
# (dist/mpi_communicator.*, dist/async_work.*), which ZeRO's async gathers (ZeRO-3 prefetch)
# and reductions run on, and the NVMe offload store's I/O threads (dist/offload/, test_dist's
# Offload.*). data/ and io/ start no threads. So: test_dist (AsyncWork's
# cross-thread completion and watchdog, MpiSingleton's one-rank MPI communicator, ZeRO and
# checkpoints on the local backend) and test_dist_mpi under mpirun at N = 2 and 4 (every
# collective on the comm thread, ZeRO-3 with prefetch 0 and 3, sharded checkpoints across world
# sizes). MPICH is not instrumented; tests/sanitizers/tsan.supp may name third-party frames
# only. OpenMP: LLVM's libomp carries TSan annotations, so test_dist keeps OMP_NUM_THREADS=2
# without false positives; the mpirun tests run 1 thread per rank (ctest sets it).
stage "TSan build"
ZDL_TARGETS="test_dist test_dist_mpi" "${sanitized[@]}" bash scripts/build.sh "$root/build-tsan" -DZDL_CUDA=OFF -DZDL_SANITIZE=thread
stage "TSan tests"
TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/sanitizers/tsan.supp" \
  "${sanitized[@]}" ctest --test-dir "$root/build-tsan" --output-on-failure -j1 --timeout 900 -L '^(test_dist|mpi)$' -LE '^examples$'

# ---- Fuzz: untrusted bytes into every file reader ------------------------------------------------
# fuzz_safetensors 60 s, fuzz_tokenizer and fuzz_checkpoint 20 s each (tests/fuzz/CMakeLists.txt),
# from the checked-in seed corpora, under ASan+UBSan with a per-allocation cap.
stage "fuzz build"
ZDL_TARGETS="fuzz_safetensors fuzz_tokenizer fuzz_checkpoint" "${sanitized[@]}" bash scripts/build.sh "$root/build-fuzz" -DZDL_CUDA=OFF -DZDL_FUZZ=ON
stage "fuzz run"
"${sanitized[@]}" ctest --test-dir "$root/build-fuzz" --output-on-failure -j1 -L '^fuzz$'
stage_end

echo "== stage durations =="
printf '%s\n' "${timings[@]}"
echo "test.sh: done in $(( $(date +%s) - start )) s"

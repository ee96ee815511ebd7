#!/usr/bin/env bash
# Checks zerodl on a GPU host in one command (docs/cuda.md, "Checking a GPU host that has no
# development packages"): with `.device` next to the sources (made by scripts/device_deps.sh),
#     bash scripts/gpu_check.sh
# unpacks the dependencies, builds zerodl with CUDA (build-gpu/, sm_90, g++ host), prints the
# GPU and tool versions, runs the GPU-facing tests, the MPI tests under the carried mpirun,
# compute-sanitizer memcheck on test_cuda, a CUDA training smoke run and the GPU benchmarks
# that exist, and prints a summary table LAST. A failing stage never stops the ones after it.
#
# Environment (all optional):
#   ZDL_GPU_STAGES   stages to run, in this order: "build test memcheck mpi train bench" (default:
#                    all; setup always runs). E.g. ZDL_GPU_STAGES="build test".
#   ZDL_GPU_BUDGET_S whole-run budget in seconds (default 540);
#                    every stage runs under `timeout` within what is left, its own cap scaled
#                    by ZDL_GPU_BUDGET_S/540 (a slow machine: raise it).
#   ZDL_GPU_TARGETS  ninja targets to build (default: all)
#   ZDL_GPU_BUILD_DIR (default build-gpu), ZDL_CUDA_ARCH (default 90), ZDL_GPU_CMAKE_ARGS (extra)
#   ZDL_DEPS_ARCHIVE (default .device/zdl-deps.tar.xz), ZDL_DEPS_PREFIX (default /opt/zdl-deps)
#   ZDL_GPU_FORCE=1  run GPU-only stages (memcheck, train, bench) even when no GPU is visible
#   OUT              where logs go (default build-gpu.logs): gpu_check.log (this output),
#                    summary.txt, logs.tar.gz (every stage's full log, CMakeCache, JUnit XML).
# Exit status: 0 when no stage failed (skips are not failures), 1 otherwise.
set -o pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root" || exit 1

STAGES="${ZDL_GPU_STAGES:-build test memcheck mpi train bench}"
BUDGET="${ZDL_GPU_BUDGET_S:-540}"
BUILD="${ZDL_GPU_BUILD_DIR:-$root/build-gpu}"
case "$BUILD" in /*) ;; *) BUILD="$root/$BUILD" ;; esac
ARCH="${ZDL_CUDA_ARCH:-90}"
ARCHIVE="${ZDL_DEPS_ARCHIVE:-$root/.device/zdl-deps.tar.xz}"
P="${ZDL_DEPS_PREFIX:-/opt/zdl-deps}"
WORK="$(mktemp -d /tmp/zdl_gpu_check.XXXXXX)"   # scratch: logs, GoogleTest build, MPI hello
LOGS="$WORK/logs"
mkdir -p "$LOGS"
RESULTS_DIR="${OUT:-$root/build-gpu.logs}"
mkdir -p "$RESULTS_DIR"
NPROC="$(nproc)"
START=$(date +%s)
DEADLINE=$((START + BUDGET))
RESERVE=10            # seconds kept for the summary
NGPU=0
GPU_DESC="no GPU"
DEPS_OK=0
BUILD_OK=0
declare -a ROWS=()
FAILED=0

say() { echo "$*" >&3; }                     # to the console from inside a stage
now() { date +%s; }
# t CMD...: CMD under timeout, bounded by the current stage's deadline.
t() {
  local left=$((STAGE_DEADLINE - $(now)))
  ((left > 0)) || return 124
  timeout -k 10 "$left" "$@"
}
want() { [[ " $STAGES " == *" $1 "* ]]; }

record() {  # name status seconds note
  ROWS+=("$(printf '%-9s %-8s %7s  %s' "$1" "$2" "$3" "$4")")
  case "$2" in FAIL | timeout) FAILED=$((FAILED + 1)) ;; esac
  write_results
}
write_results() {
  {
    local commit
    commit="$(git -C "$root" rev-parse --short HEAD 2>/dev/null)" && git -C "$root" diff --quiet HEAD 2>/dev/null || commit="$commit+changes"
    echo "gpu_check: $(date -u +%FT%TZ), $GPU_DESC${commit:+, commit $commit}"
    printf '%-9s %-8s %7s  %s\n' stage status seconds note
    printf '%s\n' "${ROWS[@]}"
  } >"$RESULTS_DIR/summary.txt"
  [ -f "$BUILD/CMakeCache.txt" ] && cp "$BUILD/CMakeCache.txt" "$LOGS/CMakeCache.txt"
  tar -C "$LOGS" -czf "$RESULTS_DIR/logs.tar.gz.tmp" . 2>/dev/null && mv "$RESULTS_DIR/logs.tar.gz.tmp" "$RESULTS_DIR/logs.tar.gz"
}

# stage NAME CAP FUNCTION: runs FUNCTION with its output in $LOGS/NAME.log. FUNCTION returns
# 0 ok, 1 failed, 3 skipped, 124 timed out, and may set NOTE.
stage() {
  local name=$1 cap=$(($2 * BUDGET / 540)) fn=$3   # caps are for the default budget; scaled
  local left=$((DEADLINE - RESERVE - $(now)))
  local limit=$((cap < left ? cap : left))
  if ((limit < 15)); then
    record "$name" skip 0 "no time left (ZDL_GPU_BUDGET_S=$BUDGET)"
    say "== $name: skipped, no time left"
    return
  fi
  say "== $name (up to ${limit}s) =="
  STAGE_DEADLINE=$(($(now) + limit))
  NOTE=""
  local t0 rc=0 status
  t0=$(now)
  "$fn" >"$LOGS/$name.log" 2>&1 || rc=$?
  local secs=$(($(now) - t0))
  case $rc in
    0) status=ok ;;
    3) status=skip ;;
    124 | 137) status=timeout; NOTE="${NOTE:+$NOTE; }stopped at ${limit}s" ;;
    *) status=FAIL ;;
  esac
  say "   $status in ${secs}s${NOTE:+: $NOTE}"
  if { [ "$status" = FAIL ] || [ "$status" = timeout ]; } && [ -s "$LOGS/$name.log" ]; then
    say "   --- last lines of $name.log ---"
    tail -n 25 "$LOGS/$name.log" | sed 's/^/   | /' >&3
  fi
  record "$name" "$status" "$secs" "$NOTE"
}

# ---------------------------------------------------------------------------------------------
# setup: unpack the carried prefix, pick up NCCL/cuDNN/cuBLAS, build GoogleTest, print versions.
# Everything it exports is used by the stages after it.

# Folders of the `nvidia` pip namespace package (NCCL, cuDNN, cuBLAS wheels of PyTorch's image).
pip_nvidia_dirs() {
  python3 -c 'import nvidia, sys; print("\n".join(p for p in nvidia.__path__))' 2>/dev/null
}
find_in_pip() {  # find_in_pip NAME_GLOB: first file under the nvidia pip folders
  local d
  for d in $NV_DIRS; do find -L "$d" -name "$1" \( -type f -o -type l \) -print 2>/dev/null; done | sort | head -1
}
# pip_shim NAME HEADER LIBSTEM...: prints a folder $P/shim/NAME with include/ (the wheel's) and
# lib/ holding LIBSTEM.so (unversioned, for find_library) and LIBSTEM.so.N.
pip_shim() {
  local name=$1 header=$2 h l s stem
  shift 2
  h="$(find_in_pip "$header")"
  [ -n "$h" ] || return 1
  s="$P/shim/$name"
  rm -rf "$s" && mkdir -p "$s/lib" && ln -s "$(dirname "$h")" "$s/include"
  for stem in "$@"; do
    # the library beside the header's package first (include/ and lib/ of one wheel)
    l="$(readlink -f "$(ls "$(dirname "$h")"/../lib/"$stem".so.* 2>/dev/null | head -1)")"
    [ -n "$l" ] || l="$(find_in_pip "$stem.so.*")"
    [ -n "$l" ] || return 1
    ln -sfn "$l" "$s/lib/$(basename "$l")"
    ln -sfn "$l" "$s/lib/$stem.so"
  done
  echo "$s"
}
# add_wheel_libs SHIM: the wheel's own lib folder goes on LD_LIBRARY_PATH (its libraries load
# their siblings by name, e.g. libcudnn.so.9 -> libcudnn_graph.so.9).
add_wheel_libs() {
  local f d
  for f in "$1"/lib/*.so; do
    d="$(dirname "$(readlink -f "$f")")"
    case ":$LD_LIBRARY_PATH:" in *":$d:"*) ;; *) LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d" ;; esac
  done
}
cuda_has() {  # cuda_has HEADER LIBSTEM: both in the toolkit
  [ -f "$CUDA_HOME/include/$1" ] && ls "$CUDA_HOME"/lib64/"$2".so* >/dev/null 2>&1
}

unpack_deps() {
  [ -f "$ARCHIVE" ] || { NOTE="no $ARCHIVE: make it with scripts/device_deps.sh and carry .device"; echo "$NOTE"; return 1; }
  local sum
  sum="$(sha256sum "$ARCHIVE" | cut -c1-16)"
  if [ -f "$P/.archive" ] && [ "$(cat "$P/.archive")" = "$sum" ]; then
    echo "deps: $P already holds $ARCHIVE ($sum)"
  else
    mkdir -p "$P" 2>/dev/null && [ -w "$P" ] || P="/tmp/zdl-deps"
    case "$P" in /?*/?* | /opt/* | /tmp/*) ;; *) NOTE="refusing ZDL_DEPS_PREFIX=$P (not a folder of its own)"; return 1 ;; esac
    rm -rf "$P" && mkdir -p "$P" || return 1
    if command -v xz >/dev/null; then
      t tar -xJf "$ARCHIVE" -C "$P" --strip-components=1 || return $?
    else  # no xz binary: Python's lzma
      t python3 - "$ARCHIVE" "$P" <<'EOF' || return $?
import sys, tarfile
with tarfile.open(sys.argv[1], "r:xz") as tf:
    for m in tf.getmembers():
        parts = m.name.split("/", 1)
        if len(parts) < 2: continue
        m.name = parts[1]
        tf.extract(m, sys.argv[2], **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))
EOF
    fi
    echo "$sum" >"$P/.archive"
    echo "deps: unpacked $ARCHIVE ($(du -h "$ARCHIVE" | cut -f1)) into $P ($(du -sh "$P" | cut -f1))"
  fi
  # lib/compat: common system libraries; the machine's own wins where it has one.
  local f name sys used=() kept=()
  mkdir -p "$P/lib/compat/unused"
  for f in "$P"/lib/compat/unused/*.so.* "$P"/lib/compat/*.so.*; do
    [ -L "$f" ] || continue
    name="$(basename "$f")"
    sys="$( (ldconfig -p 2>/dev/null | awk -v n="$name" '$1 == n {print $NF}'; ls /usr/lib/x86_64-linux-gnu/"$name" /lib/x86_64-linux-gnu/"$name" /usr/lib64/"$name" 2>/dev/null) |
            while read -r c; do [ -e "$c" ] && { echo "$c"; break; }; done)"
    if [ -n "$sys" ]; then
      [[ "$f" == */unused/* ]] || mv "$f" "$P/lib/compat/unused/"
      kept+=("$name")
    else
      [[ "$f" == */unused/* ]] && mv "$f" "$P/lib/compat/"
      used+=("$name")
    fi
  done
  echo "deps: system libraries used: ${kept[*]:-none}; carried ones used: ${used[*]:-none}"
  COMPAT_NOTE="${#used[@]} carried system libs used${used[*]:+ (${used[*]%%.so*}...)}"
}

build_gtest() {
  if [ -f "$P/lib/cmake/GTest/GTestConfig.cmake" ]; then
    echo "gtest: already built into $P"
    return 0
  fi
  local gen=(-G "Unix Makefiles")
  command -v ninja >/dev/null && gen=(-G Ninja)
  t cmake -S "$P/src/googletest" -B "$WORK/gtest" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_INSTALL_PREFIX="$P" -DCMAKE_CXX_COMPILER="$CXX" -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
      -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -Wno-dev || return $?
  t cmake --build "$WORK/gtest" -j "$NPROC" --target install || return $?
  rm -rf "$WORK/gtest"
  echo "gtest: built and installed into $P"
}

versions() {
  say "   $(uname -srm); $(. /etc/os-release 2>/dev/null; echo "$PRETTY_NAME"); $NPROC cores"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi >"$LOGS/nvidia-smi.txt" 2>&1
    nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_cap --format=csv,noheader 2>/dev/null >"$LOGS/gpus.txt"
    NGPU=$(grep -c . "$LOGS/gpus.txt")
    if ((NGPU > 0)); then
      GPU_DESC="$NGPU GPU: $(head -1 "$LOGS/gpus.txt" | cut -d, -f2- | sed 's/^ //')"
      cat "$LOGS/nvidia-smi.txt" >&3
    else
      GPU_DESC="no GPU ($(head -1 "$LOGS/nvidia-smi.txt"))"
    fi
  else
    GPU_DESC="no GPU (no nvidia-smi)"
  fi
  say "   GPU: $GPU_DESC"
  say "   nvcc: $("$NVCC" --version 2>/dev/null | grep -o 'release [0-9.]*, V[0-9.]*' || echo missing)"
  say "   $CXX: $("$CXX" --version 2>/dev/null | head -1)"
  say "   cmake: $(cmake --version | head -1 | awk '{print $3}'), ninja: $(ninja --version 2>/dev/null || echo none)"
  say "   python3: $(python3 -c 'import sys; print(sys.version.split()[0])' 2>/dev/null); torch: $(python3 -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)' 2>/dev/null || echo none)"
  say "   MPI: $(mpichversion 2>/dev/null | head -1 | awk '{print "MPICH", $NF}') ($(command -v mpirun))"
  local nh="$NCCL_INCLUDE/nccl.h" ch="$CUDNN_INCLUDE/cudnn_version.h"
  [ -f "$nh" ] && say "   NCCL: $(awk '/#define NCCL_(MAJOR|MINOR|PATCH) /{printf "%s%s", s, $3; s="."}' "$nh") ($NCCL_FROM)"
  [ -f "$ch" ] && say "   cuDNN: $(awk '/#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) /{printf "%s%s", s, $3; s="."}' "$ch") ($CUDNN_FROM)"
  [ -f "$P/include/cudnn_frontend_version.h" ] &&
    say "   cuDNN frontend: $(awk '/#define CUDNN_FRONTEND_(MAJOR|MINOR|PATCH)_VERSION /{printf "%s%s", s, $3; s="."}' "$P/include/cudnn_frontend_version.h")"
  return 0
}

setup_stage() {
  export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
  export PATH="$CUDA_HOME/bin:$PATH"
  NVCC="$(command -v nvcc || echo "$CUDA_HOME/bin/nvcc")"
  export CXX="${CXX:-g++}" CC="${CC:-gcc}"
  NV_DIRS="$(pip_nvidia_dirs)"
  local rc=0
  unpack_deps || rc=$?
  if ((rc == 0)); then
    DEPS_OK=1
    export PATH="$P/bin:$PATH"
    export LD_LIBRARY_PATH="$P/lib:$P/lib/compat${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export CMAKE_PREFIX_PATH="$P${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
    # MPICH's hydra: start ranks on this machine by fork (no ssh there).
    export HYDRA_LAUNCHER=fork
  fi
  # NCCL, cuDNN, cuBLAS: the toolkit's, else PyTorch's pip wheels (CMakeLists reads NCCL_ROOT).
  local s
  NCCL_FROM="$CUDA_HOME" NCCL_INCLUDE="$CUDA_HOME/include"
  if ! cuda_has nccl.h libnccl; then
    if s="$(pip_shim nccl nccl.h libnccl)"; then
      add_wheel_libs "$s"; export NCCL_ROOT="$s"; NCCL_INCLUDE="$s/include"; NCCL_FROM="pip, $(readlink -f "$s/lib/libnccl.so")"
    else
      NCCL_FROM="not found"; NOTE="${NOTE:+$NOTE; }no NCCL"
    fi
  fi
  CUDNN_FROM="$CUDA_HOME" CUDNN_INCLUDE="$CUDA_HOME/include"
  if ! cuda_has cudnn.h libcudnn; then
    if s="$(pip_shim cudnn cudnn.h libcudnn)"; then
      add_wheel_libs "$s"; export CUDNN_ROOT="$s" CUDNN_PATH="$s"; CUDNN_INCLUDE="$s/include"; CUDNN_FROM="pip, $(readlink -f "$s/lib/libcudnn.so")"
    else
      CUDNN_FROM="not found"
    fi
  fi
  [ -f "$P/include/cudnn_frontend.h" ] && export CUDNN_FRONTEND_INCLUDE_DIR="$P/include"
  CUBLAS_ARGS=()
  if ! cuda_has cublas_v2.h libcublas; then
    if s="$(pip_shim cublas cublas_v2.h libcublas libcublasLt)"; then
      add_wheel_libs "$s"
      CUBLAS_ARGS=(-DCUDA_cublas_LIBRARY="$s/lib/libcublas.so" -DCUDA_cublasLt_LIBRARY="$s/lib/libcublasLt.so")
      export CPATH="$s/include${CPATH:+:$CPATH}"
      echo "cuBLAS: from pip ($s)"
    else
      echo "cuBLAS: not in $CUDA_HOME nor in pip packages"
    fi
  fi
  export LD_LIBRARY_PATH
  echo "NCCL: $NCCL_FROM; cuDNN: $CUDNN_FROM"
  echo "PATH=$PATH"; echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"; echo "CMAKE_PREFIX_PATH=${CMAKE_PREFIX_PATH:-}"
  env | sort >"$LOGS/env.txt"
  versions
  ((rc == 0)) || return "$rc"
  build_gtest || { NOTE="${NOTE:+$NOTE; }GoogleTest build failed"; return 1; }
  NOTE="deps in $P; NCCL from ${NCCL_FROM%%,*}; $COMPAT_NOTE${NOTE:+; $NOTE}"
  NOTE="${NOTE//$CUDA_HOME/the toolkit}"
  return 0
}

# ---------------------------------------------------------------------------------------------
build_stage() {
  ((DEPS_OK)) || { NOTE="no dependencies (setup failed)"; return 1; }
  [ -x "$NVCC" ] || { NOTE="no nvcc in PATH or $CUDA_HOME/bin"; return 1; }
  local gen=(-G "Unix Makefiles") keep=(-k)
  command -v ninja >/dev/null && { gen=(-G Ninja); keep=(-k 0); }
  local args=(-S "$root" -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DZDL_CUDA=ON
    -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CXX_COMPILER="$CXX"
    -DCMAKE_CUDA_HOST_COMPILER="$CXX" -DCMAKE_PREFIX_PATH="$P"
    -DMPI_CXX_COMPILER="$P/bin/mpicxx" -DMPIEXEC_EXECUTABLE="$P/bin/mpiexec" "${CUBLAS_ARGS[@]}")
  # shellcheck disable=SC2206
  args+=(${ZDL_GPU_CMAKE_ARGS:-})
  echo "+ cmake ${args[*]}"
  t cmake "${args[@]}" || { NOTE="configure failed"; return 1; }
  # Where each dependency was found (the configure's proof that the carried prefix is used).
  grep -E '^(Eigen3_DIR|nlohmann_json_DIR|CLI11_DIR|GTest_DIR|MPI_CXX_HEADER_DIR|MPI_mpich_LIBRARY|MPIEXEC_EXECUTABLE|NCCL_INCLUDE_DIR|NCCL_LIBRARY|CUDNN_LIBRARY|ZDL_CUDNN_FRONTEND_DIR|CUDAToolkit_BIN_DIR|CUDA_cublas_LIBRARY|CMAKE_CXX_COMPILER|CMAKE_CUDA_COMPILER)(:[A-Z]+)?=' \
    "$BUILD/CMakeCache.txt" | sed 's/^/   /' >&3
  # shellcheck disable=SC2086
  t cmake --build "$BUILD" -j "$NPROC" -- "${keep[@]}" ${ZDL_GPU_TARGETS:-}
  local rc=$?
  local warn
  warn=$(grep -c "warning:" "$LOGS/build.log")
  if ((rc == 0)); then
    BUILD_OK=1
    NOTE="targets: ${ZDL_GPU_TARGETS:-all}; $warn compiler warnings"
  else
    [ -f "$BUILD/build.ninja" ] && BUILD_OK=1   # -k 0: what did build is still tested
    NOTE="build errors: $(grep -c -E '(error|Error)[: ]' "$LOGS/build.log") lines with 'error' (later stages use what built)"
    grep -E "error[: ]|FAILED:" "$LOGS/build.log" | head -8 | sed 's/^/   ! /' >&3
  fi
  return $rc
}

# ctest_run LABEL_ARGS...: ctest with a JUnit file, then NOTE from its counts.
ctest_run() {
  local name=$1
  shift
  [ -f "$BUILD/CTestTestfile.cmake" ] || { NOTE="not configured"; return 1; }
  local left=$((STAGE_DEADLINE - $(now)))
  t ctest --test-dir "$BUILD" --output-on-failure --timeout "$((left > 30 ? left - 10 : left))" \
    --output-junit "$LOGS/$name.junit.xml" "$@"
  local rc=$?
  local line total failed skipped
  line="$(grep -E "tests passed, [0-9]+ tests? failed out of [0-9]+" "$LOGS/$name.log" | tail -1)"
  if [ -z "$line" ]; then
    grep -q "No tests were found" "$LOGS/$name.log" && { NOTE="no tests matched ($*)"; return 3; }
    NOTE="ctest did not finish"
    return $((rc ? rc : 1))
  fi
  total=$(sed -E 's/.*out of ([0-9]+).*/\1/' <<<"$line")
  failed=$(sed -E 's/.* ([0-9]+) tests? failed.*/\1/' <<<"$line")
  skipped=$(grep -cE '^[[:space:]]*[0-9]+ - .* \((Skipped|Disabled)\)$' "$LOGS/$name.log")
  NOTE="$((total - failed - skipped)) passed, $failed failed, $skipped skipped of $total"
  if ((skipped > 0 && NGPU == 0)); then NOTE="$NOTE (no GPU: GPU tests skip)"; fi
  if ((failed > 0)); then
    grep -E '^[[:space:]]*[0-9]+ - .* \((Failed|Timeout|Not Run|SEGFAULT|Subprocess aborted|Exception)\)' "$LOGS/$name.log" | head -12 | sed 's/^/   ! /' >&3
  fi
  return $rc
}

test_stage() {
  ((BUILD_OK)) || { NOTE="nothing built"; return 1; }
  export OMP_NUM_THREADS="${OMP_NUM_THREADS:-4}"
  ctest_run test -L 'test_cuda|test_dist|gpu' -j "${ZDL_GPU_CTEST_J:-4}"
}

mpi_stage() {
  ((BUILD_OK)) || { NOTE="nothing built"; return 1; }
  # A 2-rank hello through the carried wrapper and launcher first: a broken MPI shows here in
  # one line instead of in every test (and UCX's shared memory, if refused, is switched off).
  printf '#include <mpi.h>\n#include <cstdio>\nint main(int c,char**v){MPI_Init(&c,&v);int r,n;MPI_Comm_rank(MPI_COMM_WORLD,&r);MPI_Comm_size(MPI_COMM_WORLD,&n);int s=r,t=0;MPI_Allreduce(&s,&t,1,MPI_INT,MPI_SUM,MPI_COMM_WORLD);std::printf("rank %%d/%%d sum %%d\\n",r,n,t);MPI_Finalize();return t==n*(n-1)/2?0:1;}\n' >"$LOGS/mpi_hello.cpp"
  if t mpicxx "$LOGS/mpi_hello.cpp" -o "$WORK/mpi_hello" && t mpirun -np 2 "$WORK/mpi_hello"; then
    echo "mpi hello: ok"
  else
    echo "mpi hello failed; retrying with UCX_TLS=self,tcp"
    if UCX_TLS=self,tcp t mpirun -np 2 "$WORK/mpi_hello"; then
      export UCX_TLS=self,tcp
      say "   MPI works only with UCX_TLS=self,tcp here: exported for the tests"
    else
      say "   a 2-rank MPI hello fails with the carried mpirun (see mpi.log)"
    fi
  fi
  rm -f "$WORK/mpi_hello"
  # The multi-rank tests (label mpi; the examples' ones need programs this stage does not build).
  ctest_run mpi -L mpi -LE examples -j "$NPROC"
}

memcheck_stage() {
  local cs
  cs="$(command -v compute-sanitizer || ls "$CUDA_HOME/bin/compute-sanitizer" "$CUDA_HOME/compute-sanitizer/compute-sanitizer" 2>/dev/null | head -1)"
  [ -n "$cs" ] || { NOTE="no compute-sanitizer"; return 3; }
  ((NGPU > 0 || ${ZDL_GPU_FORCE:-0})) || { NOTE="no GPU"; return 3; }
  [ -x "$BUILD/tests/test_cuda" ] || { NOTE="test_cuda not built"; return 1; }
  t "$cs" --tool memcheck --error-exitcode 86 --print-limit 50 "$BUILD/tests/test_cuda"
  local rc=$?
  NOTE="$(grep -o 'ERROR SUMMARY: [0-9]* errors\?' "$LOGS/memcheck.log" | tail -1)"
  NOTE="${NOTE:-no summary}; $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\]' "$LOGS/memcheck.log" | tr -s ' ' | paste -sd, -)"
  return $rc
}

train_stage() {
  local exe="$BUILD/examples/train_gpt"
  [ -x "$exe" ] || { NOTE="train_gpt not built"; return 3; }
  "$exe" --help 2>&1 | grep -q -- "--device" || { NOTE="train_gpt has no --device yet"; return 3; }
  ((NGPU > 0 || ${ZDL_GPU_FORCE:-0})) || { NOTE="no GPU"; return 3; }
  local common=(--device cuda --steps 30 --eval-every 0 --n-layer 2 --n-head 4 --n-embd 128 --seq 64 --batch 16)
  echo "+ train_gpt ${common[*]}"
  t "$exe" "${common[@]}" || { NOTE="1 process failed"; return 1; }
  # Two ranks on one GPU: MPI with host staging (NCCL refuses two ranks on one GPU).
  echo "+ mpirun -np 2 train_gpt ${common[*]} --zero-stage 3"
  t mpirun -np 2 "$exe" "${common[@]}" --zero-stage 3 || { NOTE="2 ranks (ZeRO-3) failed"; return 1; }
  NOTE="1 process and 2 ranks (ZeRO-3) on cuda: $(grep -o 'loss [0-9.]*' "$LOGS/train.log" | tail -1)"
}

bench_stage() {
  local scripts=() f
  for f in bench/gpu/*.sh bench/run_gpu*.sh bench/*_gpu.sh bench/*_cuda.sh; do
    [ -f "$f" ] && scripts+=("$f")
  done
  ((${#scripts[@]})) || { NOTE="no GPU benchmarks (bench/gpu/*.sh, bench/run_gpu*.sh)"; return 3; }
  ((NGPU > 0 || ${ZDL_GPU_FORCE:-0})) || { NOTE="no GPU: ${#scripts[@]} benchmark(s) not run"; return 3; }
  local ok=0 failed=() summaries=""
  for f in "${scripts[@]}"; do
    local n line
    n="bench_$(basename "$f" .sh)"
    echo "+ bash $f $BUILD"
    if t bash "$f" "$BUILD" >"$LOGS/$n.log" 2>&1; then ok=$((ok + 1)); else failed+=("$(basename "$f")"); fi
    say "   --- $f: tail of its output ---"
    tail -n 15 "$LOGS/$n.log" | sed 's/^/   | /' >&3
    # A benchmark's "summary: ..." line (its headline number) goes into the table's note.
    line="$(grep '^summary: ' "$LOGS/$n.log" | tail -n 1)"
    [ -n "$line" ] && summaries="$summaries; ${line#summary: }"
  done
  NOTE="$ok/${#scripts[@]} ran${failed[*]:+; failed: ${failed[*]}}$summaries"
  ((${#failed[@]} == 0))
}

main() {
  exec 3>&1
  say "gpu_check: $(date -u +%FT%TZ) in $root; stages: setup $STAGES; budget ${BUDGET}s; logs in $RESULTS_DIR"
  stage setup 200 setup_stage
  # Without the build stage, the stages after it use an earlier build-gpu/ as it is.
  want build || { [ -f "$BUILD/CTestTestfile.cmake" ] && BUILD_OK=1; }
  want build && stage build 330 build_stage
  want test && stage test 200 test_stage
  want memcheck && stage memcheck 150 memcheck_stage
  want mpi && stage mpi 200 mpi_stage
  want train && stage train 90 train_stage
  want bench && stage bench 200 bench_stage
  local total=$(($(now) - START))
  say ""
  say "== gpu_check summary: $GPU_DESC; build $BUILD; full logs: $RESULTS_DIR/{gpu_check.log,summary.txt,logs.tar.gz} =="
  say "$(printf '%-9s %-8s %7s  %s' stage status seconds note)"
  printf '%s\n' "${ROWS[@]}" >&3
  if ((FAILED)); then
    say "$(printf '%-9s %-8s %7s  %s' total FAILED "$total" "$FAILED stage(s) failed")"
  else
    say "$(printf '%-9s %-8s %7s  %s' total ok "$total" "no stage failed")"
  fi
  ((FAILED == 0))
}

main "$@" 2>&1 | tee "$RESULTS_DIR/gpu_check.log"
rc=${PIPESTATUS[0]}
rm -rf "$WORK"
exit "$rc"

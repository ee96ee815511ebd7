#!/usr/bin/env bash
# Checks zerodl on a GPU host in one command, from programs built elsewhere and packed by
# scripts/gpu_pack.sh (nothing is compiled here):
#     bash scripts/gpu_check.sh [CARRY_DIR]        (default .device/carry; or CARRY_DIR.tar.xz)
# Stages, each under its own time cap, a failing one never stopping the next:
#   libs       every program finds its shared libraries (the host's CUDA libraries: the toolkit's
#              or PyTorch's pip wheels; the carried MPICH)
#   cuda       test_cuda, one process per test suite (a sticky CUDA error spoils one suite, not
#              all); a failing suite is rerun with ZDL_CUDA_SYNC_LAUNCHES=1, which names the
#              kernel launch that failed
#   train      train_gpt --device cuda: one process, then 2 ranks with ZeRO-3
#   cli        tests/examples/train_gpt_cuda_test.py (f32 against the CPU, checkpointing, bf16,
#              2 ranks on one GPU, an export from the GPU)
#   gpt2       bench/gpu/run_gpt2.sh (GPT-2 124M: zerodl stage 0 and 3 vs torch eager/compile)
#   mpi        test_dist_mpi's GPU tests at N = 2 and 4 (ranks share the GPU: MPI host staging)
#   dist       test_dist's GPU tests (NCCL with one rank, the local backend on GPU tensors)
#   stages     bench/gpu/run_stages.sh (GPT-2 124M step time by ZeRO stage, local and NCCL backend)
#   offload    bench/gpu/run_offload.sh (GPT-2 124M with the optimizer states in host memory vs not)
#   attention  bench/gpu/run_attention.sh (cuDNN fused attention vs zerodl's kernels)
#   memcheck   compute-sanitizer memcheck over test_cuda's kernel suites
#   profile    one GPT-2 124M step's GPU time by kernel (Nsight Compute's ncu, durations only;
#              ZDL_PROFILE_ARGS: more train_gpt flags, e.g. "--zero-stage 0")
#   cpu        the host's CPU, not the GPU: train_step_bench (packed for AVX-512) on 2 of its cores
#              next to PyTorch (bench/run_train_step.sh), several ranks next to torch DDP and FSDP2
#              (bench/run_side_by_side.sh), zerodl's GEMM back ends side by side, and whether
#              oneDNN's bf16 GEMM takes AMX. Not in the default list: name it in ZDL_GPU_STAGES
# and prints a summary table LAST. Environment: ZDL_GPU_STAGES (a subset, in that order),
# ZDL_GPU_BUDGET_S (whole run, default 480), ZDL_CUDA_FILTER (which suites the cuda stage runs),
# OUT (where gpu_check.log, summary.txt and logs.tar.gz go; default gpu_check.out).
# Exit status: 0 when no stage failed.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root" || exit 1
C="${1:-$root/.device/carry}"
case "$C" in /*) ;; *) C="$root/$C" ;; esac
if [ ! -d "$C" ] && [ -f "$C.tar.xz" ]; then  # the packed folder: unpack it beside the archive
  tar -C "$(dirname "$C")" -xJf "$C.tar.xz" 2>/dev/null ||
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$C.tar.xz" "$(dirname "$C")" ||
    { echo "gpu_check: cannot unpack $C.tar.xz" >&2; exit 1; }
fi
[ -x "$C/build/tests/test_cuda" ] || { echo "gpu_check: no $C/build (make it with scripts/gpu_pack.sh)" >&2; exit 1; }
B="$C/build"
STAGES="${ZDL_GPU_STAGES:-libs cuda train cli gpt2 mpi dist stages offload attention memcheck profile}"
BUDGET="${ZDL_GPU_BUDGET_S:-480}"
RESULTS="${OUT:-$root/gpu_check.out}"
mkdir -p "$RESULTS"
LOGS="$(mktemp -d /tmp/zdl_gpu_check.XXXXXX)"
START=$(date +%s)
DEADLINE=$((START + BUDGET))
declare -a ROWS=()
FAILED=0
now() { date +%s; }
say() { echo "$*" >&3; }

# The host's CUDA libraries: the toolkit's, then every folder of PyTorch's nvidia pip wheels.
nv_dirs="$(python3 -c 'import nvidia; print("\n".join(nvidia.__path__))' 2>/dev/null |
  while read -r d; do find -L "$d" -name 'lib*.so*' -printf '%h\n' 2>/dev/null; done | sort -u | paste -sd:)"
export LD_LIBRARY_PATH="$C/lib${nv_dirs:+:$nv_dirs}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$C/bin:/usr/local/cuda/bin:$PATH"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-4}"
# MPICH's launcher starts the ranks by fork on this host. (Not HYDRA_LAUNCHER in the
# environment: the single-process runs would inherit it.)
MPIRUN=(mpirun -launcher fork)

record() {  # name status seconds note
  ROWS+=("$(printf '%-9s %-7s %5s  %s' "$1" "$2" "$3" "$4")")
  case "$2" in FAIL | timeout) FAILED=$((FAILED + 1)) ;; esac
  { printf '%-9s %-7s %5s  %s\n' stage status secs note; printf '%s\n' "${ROWS[@]}"; } >"$RESULTS/summary.txt"
  tar -C "$LOGS" -czf "$RESULTS/logs.tar.gz" . 2>/dev/null
}
# stage NAME CAP FUNCTION: FUNCTION's output goes to $LOGS/NAME.log; it returns 0 ok, 3 skip,
# anything else failed, and may set NOTE. STOP is the stage's deadline (for `t`).
stage() {
  local name=$1 cap=$2 fn=$3 left limit rc=0 t0 status
  [[ " $STAGES " == *" $name "* ]] || return 0
  left=$((DEADLINE - 5 - $(now)))
  limit=$((cap < left ? cap : left))
  if ((limit < 10)); then record "$name" skip 0 "no time left"; return; fi
  say "== $name (up to ${limit}s)"
  STOP=$(($(now) + limit)) NOTE="" t0=$(now)
  "$fn" >"$LOGS/$name.log" 2>&1 || rc=$?
  case $rc in 0) status=ok ;; 3) status=skip ;; 124 | 137) status=timeout ;; *) status=FAIL ;; esac
  say "   $status in $(($(now) - t0))s: $NOTE"
  if [ "$status" = FAIL ] || [ "$status" = timeout ]; then tail -n 30 "$LOGS/$name.log" | sed 's/^/   | /' >&3; fi
  record "$name" "$status" $(($(now) - t0)) "$NOTE"
}
t() {  # t CMD...: CMD under timeout, within the stage's deadline
  local left=$((STOP - $(now)))
  ((left > 0)) || return 124
  timeout -k 5 "$left" "$@"
}
gtest_counts() {  # gtest_counts LOG: "P passed, F failed, S skipped" over every run in LOG
  awk '/^\[  PASSED  \] [0-9]+ test/{p+=$4} /^\[  FAILED  \] [A-Za-z0-9_\/]+\.[A-Za-z0-9_\/]+ \(/{f++}
       /^\[  SKIPPED \] [0-9]+ test/{s+=$4} END{printf "%d passed, %d failed, %d skipped", p, f, s}' "$1"
}

libs_stage() {
  local f missing=0
  for f in "$B"/*/* "$C"/bin/*; do
    [ -f "$f" ] || continue
    if ldd "$f" | grep "not found"; then echo "^ $f"; missing=1; fi
  done
  ldd "$B/tests/test_cuda" | grep -E "cudnn|nccl|cublas|mpich|cudart"
  nvidia-smi; lscpu | grep -E "Model name|^CPU\(s\)"
  python3 -c 'import torch; print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version(), "nccl", torch.cuda.nccl.version())'
  NOTE="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1); $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
  ((missing == 0)) || { NOTE="missing libraries (see libs.log)"; return 1; }
}

cuda_stage() {
  local exe="$B/tests/test_cuda" suites s bad=()
  suites="$("$exe" --gtest_list_tests --gtest_filter="${ZDL_CUDA_FILTER:-*}" | grep -E '^[A-Za-z0-9_/]+\.$' | tr -d .)"
  for s in $suites; do
    echo "##### $s"
    t timeout -k 5 60 "$exe" --gtest_filter="$s.*" --gtest_brief=1 || bad+=("$s")
    (($(now) < STOP)) || return 124
  done
  NOTE="$(gtest_counts "$LOGS/cuda.log")${bad[*]:+; failing suites: ${bad[*]}}"
  for s in "${bad[@]}"; do  # the failing suites again, each launch synchronized
    (($(now) + 20 < STOP)) || break
    ZDL_CUDA_SYNC_LAUNCHES=1 timeout 60 "$exe" --gtest_filter="$s.*" >"$LOGS/cuda_sync_$s.log" 2>&1
  done
  ((${#bad[@]} == 0))
}

dist_stage() {
  t "$B/tests/test_dist" --gtest_filter='NcclCommunicator.*:LocalCommunicator.*' || { NOTE="$(gtest_counts "$LOGS/dist.log")"; return 1; }
  NOTE="$(gtest_counts "$LOGS/dist.log")"
}

mpi_stage() {
  local np rc=0 notes=()
  for np in 2 4; do
    echo "##### np $np"
    t "${MPIRUN[@]}" -np $np "$B/tests/test_dist_mpi" --expect-world-size=$np \
      --gtest_filter='ZeroCudaMpi.*:MpiCommunicator.StagesCudaTensorsThroughPinnedMemory' || rc=1
    notes+=("N=$np: $(grep -o 'test_dist_mpi: .*' "$LOGS/mpi.log" | tail -1)")
  done
  NOTE="${notes[*]}"
  return $rc
}

train_stage() {
  local exe="$B/examples/train_gpt" common=(--device cuda --steps 30 --eval-every 0 --n-layer 2 --n-head 4 --n-embd 128 --seq 64 --batch 16)
  echo "+ train_gpt ${common[*]}"
  t "$exe" "${common[@]}" || { NOTE="1 process failed"; return 1; }
  local one; one="$(grep -o 'loss [0-9.]*' "$LOGS/train.log" | tail -1)"
  echo "+ mpirun -np 2 train_gpt ${common[*]} --zero-stage 3"
  t "${MPIRUN[@]}" -np 2 "$exe" "${common[@]}" --zero-stage 3 || { NOTE="1 process: $one; 2 ranks (ZeRO-3) failed"; return 1; }
  NOTE="1 process: $one; 2 ranks ZeRO-3: $(grep -o 'loss [0-9.]*' "$LOGS/train.log" | tail -1)"
}

cli_stage() {  # tests/examples/train_gpt_cuda_test.py: the program end to end on the GPU
  ZDL_MPIEXEC="$C/bin/mpirun" ZDL_MPIEXEC_PREFLAGS="-launcher fork" \
    t python3 "$root/tests/examples/train_gpt_cuda_test.py" "$B/examples/train_gpt"
  local rc=$?
  NOTE="$(grep -E '^(Ran|OK|FAILED|SKIP)' "$LOGS/cli.log" | paste -sd' ')"
  return $rc
}

gpt2_stage() {
  t bash "$root/bench/gpu/run_gpt2.sh" "$B"
  local rc=$?
  NOTE="$(grep -E '^(zerodl|torch)' "$LOGS/gpt2.log" | tr -s ' ' | paste -sd';')"
  return $rc
}

stages_stage() {
  t bash "$root/bench/gpu/run_stages.sh" "$B"
  local rc=$?
  NOTE="$(grep -E '^[0-3] ' "$LOGS/stages.log" | awk '{printf "%s%s/%s %s ms", s, $1, $2, $3; s="; "}')"
  return $rc
}

offload_stage() {
  t bash "$root/bench/gpu/run_offload.sh" "$B"
  local rc=$?
  NOTE="$(grep -E '^[03] ' "$LOGS/offload.log" | awk '{printf "%s%s/%s %s ms %s GiB", s, $1, $2, $3, $5; s="; "}')"
  return $rc
}

attention_stage() {
  t bash "$root/bench/gpu/run_attention.sh" "$B"
  local rc=$?
  NOTE="$(grep '^summary: ' "$LOGS/attention.log" | tail -1)"
  return $rc
}

profile_stage() {  # the GPU time of one GPT-2 124M step (B=4) by kernel, from Nsight Compute
  command -v ncu >/dev/null || { NOTE="no ncu"; return 3; }
  local data=/tmp/zdl_profile_data.bin wall
  python3 -c "import os; open('$data', 'wb').write(os.urandom(8 << 20))"
  local args=(--device cuda --dtype bf16 --data "$data" --n-layer 12 --n-head 12 --n-embd 768 --seq 1024 --batch 4
    --vocab-size 50257 --vocab-multiple 128 --eval-every 0)
  # The same step's wall time without the profiler: next to the kernels' sum, what is left is
  # time the GPU waited for the host (launches, synchronizations).
  # shellcheck disable=SC2086
  t "$B/examples/train_gpt" "${args[@]}" --steps 8 --log-every 1 --metrics "$LOGS/profile_wall.jsonl" \
    ${ZDL_PROFILE_ARGS:-} >/dev/null || return $?
  wall="$(python3 -c 'import json, sys; s = [j["ms"] for j in map(json.loads, open(sys.argv[1])) if "ms" in j][3:]
print(f"{sorted(s)[len(s) // 2]:.1f}")' "$LOGS/profile_wall.jsonl")"
  # shellcheck disable=SC2086
  t ncu --metrics gpu__time_duration.sum --csv --print-units base --log-file "$LOGS/ncu.csv" \
    "$B/examples/train_gpt" "${args[@]}" --steps 2 ${ZDL_PROFILE_ARGS:-} || return $?
  python3 - "$LOGS/ncu.csv" <<'PY' | tee "$LOGS/profile.txt"
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]; rows = rows[1:]
name, value = head.index("Kernel Name"), head.index("Metric Value")
tot, cnt = collections.Counter(), collections.Counter()
for r in rows:
    k = r[name].split("(")[0][:70]
    tot[k] += float(r[value].replace(",", "")); cnt[k] += 1
all_ns = sum(tot.values())
print(f"2 steps, {sum(cnt.values())} kernels, {all_ns / 2e6:.1f} ms of kernel time per step")
for k, ns in tot.most_common(30):
    print(f"{ns / 2e6:9.2f} ms/step {100 * ns / all_ns:5.1f}% {cnt[k] // 2:5d}x  {k}")
PY
  NOTE="$(head -1 "$LOGS/profile.txt"); the step without the profiler: ${wall} ms (median of steps 4-8)"
}

cpu_stage() {
  local exe="$C/cpu/bench/train_step_bench" shape rc=0
  [ -x "$exe" ] || { NOTE="not packed (ZDL_PACK_CPU=0)"; return 3; }
  grep -qw avx512f /proc/cpuinfo || { NOTE="no AVX-512 here: the packed build needs it"; return 3; }
  local pin=(taskset -c 0,1)  # two cores, as the CPU machines the benchmarks compare on
  command -v taskset >/dev/null || pin=()
  local -x OMP_NUM_THREADS=2
  echo "CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1); $(grep -o -w -E 'avx512f|avx512_bf16|amx_tile|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  # First the comparison with PyTorch (torch.compile's compilations take most of the stage).
  DTYPES="${ZDL_CPU_DTYPES:-f32 bf16}" t "${pin[@]}" bash "$root/bench/run_train_step.sh" "$C/cpu" || rc=$?
  NOTE="$(grep -E '^L[0-9]' "$LOGS/cpu.log" | awk '{printf "%s%s %s zerodl/best %s", s, $1, $6, $NF; s="; "}')"
  ((rc == 0)) || return $rc
  # Whether oneDNN's bf16 GEMM runs on AMX tiles (its GEMM API logs nothing to ONEDNN_VERBOSE):
  # the same bf16 step again with oneDNN held below AMX. Another loss (other bits) says the two
  # ran different kernels, and the step times what AMX gives.
  if grep -qw amx_bf16 /proc/cpuinfo; then
    local cap
    for cap in "" ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16; do
      echo "+ ${cap:-(no cap)} train_step_bench --gemm onednn --dtype bf16 (L6 H6 C384 T256 B4)"
      t env $cap "${pin[@]}" "$exe" --layers 6 --heads 6 --embd 384 --seq 256 --batch 4 --gemm onednn --steps 5 \
        --dtype bf16 || return $?
    done
  fi
  # Several ranks on the same two cores (the issue's shape; one thread per rank at N = 2, four
  # ranks at N = 4): zerodl's stages next to torch DDP and FSDP2 on gloo.
  if [ -x "$C/cpu/examples/train_gpt" ]; then
    echo "+ bench/run_side_by_side.sh (L4 H4 C256 T128, global batch 8, 20 steps) at N = 2 and 4"
    MODEL="--n-layer 4 --n-head 4 --n-embd 256 --seq 128 --batch 8" LR=1e-3 STEPS=20 ZDL_MPIRUN="${MPIRUN[*]}" \
      t "${pin[@]}" bash "$root/bench/run_side_by_side.sh" "$C/cpu" 2 4 || return $?
    local ranks
    ranks=$(awk '/^N = [0-9]+ ranks/{n=$3; ns[n]=1}
      /^zerodl DDP /{d[n]=$7} /^torch DDP  /{td[n]=$7} /^zerodl ZeRO-3 /{z[n]=$7}
      /^torch FSDP2 /{if (!(n in f) || $8 < f[n]) f[n]=$8}
      END{for (k in ns) if (d[k] > 0 && td[k] > 0 && z[k] > 0 && f[k] > 0)
            printf "%sN=%s DDP %.2fx torch, ZeRO-3 %.2fx FSDP2", (s++ ? "; " : ""), k, td[k]/d[k], f[k]/z[k]}' \
      "$LOGS/cpu.log")
    NOTE="$NOTE; ${ranks:-several ranks: no ratio (see cpu.log)}"
  fi
  for shape in "--layers 4 --heads 4 --embd 256 --seq 128 --batch 8" "--layers 6 --heads 6 --embd 384 --seq 256 --batch 4"; do
    # shellcheck disable=SC2086
    t "${pin[@]}" "$exe" $shape --gemm avx512,onednn,avx2 || return $?
  done
}

memcheck_stage() {
  local cs
  cs="$(command -v compute-sanitizer || ls /usr/local/cuda/compute-sanitizer/compute-sanitizer 2>/dev/null)"
  [ -n "$cs" ] || { NOTE="no compute-sanitizer"; return 3; }
  t "$cs" --tool memcheck --error-exitcode 86 --print-limit 20 "$B/tests/test_cuda" \
    --gtest_filter="${ZDL_MEMCHECK_FILTER:-CudaElementwise*:CudaReduce*:CudaNn*:CudaAttention*:CudaGemm*:CudaMatmul*:CudaLinear*:CudaViews*:CudaOptim*:CudaTensor*}" --gtest_brief=1
  local rc=$?
  NOTE="$(grep -o 'ERROR SUMMARY: [0-9]* error' "$LOGS/memcheck.log" | tail -1); $(gtest_counts "$LOGS/memcheck.log")"
  return $rc
}

main() {
  exec 3>&1
  say "gpu_check: $(date -u +%FT%TZ), carried build $C, stages: $STAGES, budget ${BUDGET}s"
  stage libs 30 libs_stage
  stage cuda 120 cuda_stage
  stage train 40 train_stage
  stage cli 90 cli_stage
  stage gpt2 180 gpt2_stage
  stage mpi 60 mpi_stage
  stage dist 30 dist_stage
  stage stages 120 stages_stage
  stage offload 120 offload_stage
  stage attention 40 attention_stage
  stage memcheck 120 memcheck_stage
  stage profile 120 profile_stage
  stage cpu 540 cpu_stage
  say ""
  say "== gpu_check summary ($(($(now) - START))s; logs in $RESULTS/logs.tar.gz)"
  say "$(printf '%-9s %-7s %5s  %s' stage status secs note)"
  printf '%s\n' "${ROWS[@]}" >&3
  ((FAILED == 0))
}
main 2>&1 | tee "$RESULTS/gpu_check.log"
rc=${PIPESTATUS[0]}
rm -rf "$LOGS"
exit "$rc"

#!/usr/bin/env bash
# Planted-bug check: do the tests fail when a known-critical line is broken on purpose?
#   scripts/planted_bugs.sh [--full] [--only REGEX] [-j N] [SCRATCH_DIR]
#   ZDL_TARGETS="zdl test_nn ..." scripts/planted_bugs.sh ...   builds only those targets (as
#   scripts/build.sh); they must include every test binary the selections run.
# Copies the working tree (tracked and untracked-but-not-ignored files, plus third_party/) into
# SCRATCH_DIR/src, builds it on the CPU (Release, -DZDL_CUDA=OFF) in SCRATCH_DIR/build, checks
# that every selection passes as is, then for each bug of the list below: makes its one edit,
# rebuilds, runs its ctest selection (--full: the whole CPU suite), records CAUGHT (the
# selection failed) or MISSED (it passed), and restores the file. Exits 1 if a bug was missed,
# 2 on a broken list entry (original text not found exactly once, or the edit does not build).
# SCRATCH_DIR given: kept, and reused by later runs (incremental builds); otherwise a temporary
# directory, removed at the end. Logs: SCRATCH_DIR/logs/. See docs/reliability.md.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

full=0 only="" jobs="$(nproc)" scratch=""
while [ $# -gt 0 ]; do
  case "$1" in
    --full) full=1 ;;
    --only) only="${2:?--only needs a regex}"; shift ;;
    -j) jobs="${2:?-j needs a number}"; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    -*) echo "planted_bugs: unknown option $1" >&2; exit 2 ;;
    *) scratch="$1" ;;
  esac
  shift
done

# ---- the list -------------------------------------------------------------------------------
# bug NAME FILE SELECTION ORIGINAL REPLACEMENT: ORIGINAL must occur exactly once in FILE.
# SELECTION: ctest arguments that are enough to catch it (a label of a test binary, or names).
names=() files=() sels=() olds=() news=()
bug() { names+=("$1"); files+=("$2"); sels+=("$3"); olds+=("$4"); news+=("$5"); }

bug zero-grad-average dist/zero/param_unit.cpp '-R ^dist_mpi_np2$' \
  'const double inv_n = 1.0 / ctx_.comm->size();' \
  'const double inv_n = 1.0;'
bug zero-shard-begin dist/zero/param_unit.cpp '-R ^dist_mpi_np2$' \
  'shard_begin_ = ctx_.comm->rank() * shard_size_;' \
  'shard_begin_ = (ctx_.comm->rank() + 1) % N * shard_size_;'
# Ranks 1 and 2 swap leaves only from N = 4 on (bit reversal is the identity at N = 2).
bug exact-reduction-order dist/zero/partitioner.cpp '-R ^dist_mpi_np4$' \
  'return micro_step * n + leaf;' \
  'return micro_step * n + r;'
bug adam-bias-correction kernels/cpu/optim.cpp '-L ^test_optim$' \
  'const double bc1 = 1.0 - std::pow(h.beta1, static_cast<double>(h.step));' \
  'const double bc1 = 1.0;'
bug clip-norm-sqrt optim/clip.cpp '-L ^test_optim$' \
  'return std::sqrt(grad_sum_squares(params));' \
  'return grad_sum_squares(params);'
# The single-process tests key every micro-batch the same way: ranks splitting a batch differ.
bug dropout-position nn/layers.cpp '-R ^dist_mpi_np2$' \
  'return dropout(x, p, true, pos->seed, s, pos->first_sequence * per_row);' \
  'return dropout(x, p, true, pos->seed, s, 0);'
bug checkpoint-checksum-unverified io/checkpoint.cpp '-R ^Checkpoint\.' \
  'ZDL_CHECK(have_sum == want_sum,' \
  'ZDL_CHECK(true,'
bug causal-mask kernels/cpu/attention.cpp '-R ^Attention\.' \
  'const int64_t n = r0 + i + 1;  // row r0+i sees keys [0, n)' \
  'const int64_t n = std::min(r0 + i + 2, nk);  // row r0+i sees keys [0, n)'
bug layernorm-eps kernels/cpu/layer_norm.cpp '-R ^LayerNorm\.' \
  'double rs = 1.0 / std::sqrt(v / static_cast<double>(C) + eps);' \
  'double rs = 1.0 / (std::sqrt(v / static_cast<double>(C)) + eps);'
bug tied-weight-grad nn/gpt.cpp '-L ^test_nn$' \
  'return linear(hidden(ids), wte->weight, Tensor());' \
  'return linear(hidden(ids), wte->weight.detach(), Tensor());'
# More of the same mechanisms, on other paths.
bug zero-clip-norm-sqrt dist/zero/partitioner.cpp '-L ^test_dist$' \
  'last_grad_norm_ = std::sqrt(sq);' \
  'last_grad_norm_ = sq;'
bug clip-eps optim/clip.cpp '-L ^test_optim$' \
  'return max_norm / (norm + kClipNormEpsilon);' \
  'return max_norm / (norm + 1e-7);'
bug dropout-kernel-offset kernels/cpu/dropout.cpp '-L ^test_autograd$' \
  'gen.uniform(static_cast<uint64_t>(offset + i))' \
  'gen.uniform(static_cast<uint64_t>(i))'
bug checkpoint-checksum-short io/checkpoint.cpp '-R ^Checkpoint\.' \
  'h = fnv1a64(buf.data(), n, h);' \
  'h = fnv1a64(buf.data(), n - 1, h);'
bug sharded-checksum-unverified dist/checkpoint/sharded_checkpoint.cpp '-R ^ShardedCheckpointLocal\.' \
  'ZDL_CHECK(sum == lf.fnv1a64,' \
  'ZDL_CHECK(true,'
# Offload (docs/offload.md): a changed buffer evicted without its write, a gather that skips
# the read of its shard, a refresh whose shard write is lost, an optimizer step one unit behind.
bug offload-write-back-lost dist/offload/offloaded_buffer.cpp '-R ^Offload\.' \
  '  if (dirty_) {' \
  '  if (false) {'
bug offload-shard-not-read dist/zero/param_unit.cpp '-R ^Offload\.' \
  '    shard_off_->fetch_async();
    shard_off_->wait();' \
  '    shard_off_->fetch_for_overwrite();'
bug offload-refresh-unsaved dist/zero/param_unit.cpp '-R ^Offload\.' \
  'Resident r({master_off_.get()}, {}, {shard_off_.get()});' \
  'Resident r({master_off_.get(), shard_off_.get()});'
bug offload-traffic-double-read dist/offload/offloaded_buffer.cpp '-R ^Offload\.' \
  '  dirty_ = false;
}

void OffloadedBuffer::fetch_for_overwrite() {' \
  '  dirty_ = false;
  store_.read_async(region_, storage_->data(), bytes_).get();
}

void OffloadedBuffer::fetch_for_overwrite() {'
# Direct I/O: whole blocks read straight into a buffer past its end; a bounce write of the
# first bytes only.
bug offload-direct-overrun dist/offload/nvme_store.cpp '-R ^Offload\.' \
  '    done = bytes / kAlign * kAlign;' \
  '    done = (bytes + kAlign - 1) / kAlign * kAlign;'
bug offload-bounce-short dist/offload/nvme_store.cpp '-R ^Offload\.' \
  '      std::memcpy(bounce, p + done, static_cast<size_t>(n));' \
  '      std::memcpy(bounce, p + done, static_cast<size_t>(std::min<int64_t>(n, kAlign)));'

# ---- scratch copy and build -----------------------------------------------------------------
temporary=0
if [ -z "$scratch" ]; then
  scratch="$(mktemp -d "${TMPDIR:-/tmp}/zdl-planted-bugs.XXXXXX")"
  temporary=1
fi
mkdir -p "$scratch/src" "$scratch/logs"
scratch="$(cd "$scratch" && pwd)"
src="$scratch/src" build="$scratch/build"
[ -d "$root/third_party" ] || { echo "planted_bugs: $root/third_party is missing (scripts/setup.sh)" >&2; exit 2; }

# As scripts/test.sh: mpirun as root and oversubscribed.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"

# Whatever stops the run, the scratch copy is left without a planted bug. Restored by a copy:
# the new mtime makes ninja rebuild the file.
backup="$scratch/original.bak" planted=""
restore() { if [ -n "$planted" ]; then cp "$backup" "$src/$planted"; planted=""; fi; }
cleanup() { restore; if [ "$temporary" = 1 ]; then rm -rf "$scratch"; fi; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "planted_bugs: copying $root into $src"
{ git -C "$root" ls-files -z --cached --others --exclude-standard; (cd "$root" && find third_party -type f -print0); } |
  python3 "$root/scripts/planted_bugs.py" sync "$root" "$src"
if [ ! -f "$build/CMakeCache.txt" ]; then
  echo "planted_bugs: configuring $build"
  compiler=()  # clang++ when present, as scripts/build.sh
  if command -v clang++ >/dev/null; then compiler=(-DCMAKE_CXX_COMPILER=clang++); fi
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DZDL_CUDA=OFF "${compiler[@]}" \
    >"$scratch/logs/configure.log" 2>&1 ||
    { cat "$scratch/logs/configure.log"; exit 2; }
fi
# shellcheck disable=SC2086
build_tree() { ninja -C "$build" -j"$jobs" ${ZDL_TARGETS:-} >"$1" 2>&1; }
run_tests() { ctest --test-dir "$build" -j"$jobs" --timeout 900 --no-tests=error --output-on-failure "$@"; }
selection_args() { if [ "$full" = 1 ]; then sel_args=(); else read -ra sel_args <<<"$1"; fi; }

echo "planted_bugs: building (log: $scratch/logs/build.log)"
t0=$(date +%s)
build_tree "$scratch/logs/build.log" || { tail -40 "$scratch/logs/build.log"; exit 2; }
echo "planted_bugs: built in $(($(date +%s) - t0)) s"

picked=()
for i in "${!names[@]}"; do
  if [ -z "$only" ] || [[ "${names[$i]}" =~ $only ]]; then picked+=("$i"); fi
done
[ "${#picked[@]}" -gt 0 ] || { echo "planted_bugs: --only '$only' matches no bug" >&2; exit 2; }

# A selection that already fails would count every bug as caught: each must pass first.
declare -A seen=()
for i in "${picked[@]}"; do
  selection_args "${sels[$i]}"
  key="${sel_args[*]:-(full suite)}"
  [ -z "${seen[$key]:-}" ] || continue
  seen[$key]=1
  echo "planted_bugs: baseline: ctest $key"
  run_tests "${sel_args[@]}" >"$scratch/logs/baseline.log" 2>&1 ||
    { tail -30 "$scratch/logs/baseline.log"; echo "planted_bugs: 'ctest $key' fails without a planted bug" >&2; exit 2; }
done

# ---- one round per bug ----------------------------------------------------------------------
rows=() missed=0 broken=0 n=0
for i in "${picked[@]}"; do
  n=$((n + 1))
  name="${names[$i]}" file="${files[$i]}"
  selection_args "${sels[$i]}"
  sel_text="${sel_args[*]:-(full suite)}"
  t0=$(date +%s)
  cp "$src/$file" "$backup"
  if ! line="$(python3 "$root/scripts/planted_bugs.py" plant "$src/$file" "${olds[$i]}" "${news[$i]}")"; then
    rows+=("$(printf '%-30s %-46s %-44s %-7s %5s' "$name" "$file:?" "$sel_text" "BROKEN" "-")")
    broken=1
    continue
  fi
  planted="$file"
  echo "[$n/${#picked[@]}] $name: $file:$line planted; building"
  log="$scratch/logs/$name.log"
  if ! build_tree "$log"; then
    result="BROKEN"; broken=1
    echo "[$n/${#picked[@]}] $name: the edit does not build (see $log)"
  else
    echo "[$n/${#picked[@]}] $name: ctest $sel_text"
    if run_tests "${sel_args[@]}" >>"$log" 2>&1; then result="MISSED"; missed=1; else result="caught"; fi
  fi
  restore
  secs=$(($(date +%s) - t0))
  echo "[$n/${#picked[@]}] $name: $result in $secs s"
  rows+=("$(printf '%-30s %-46s %-44s %-7s %5d' "$name" "$file:$line" "$sel_text" "$result" "$secs")")
done
rm -f "$backup"

echo
printf '%-30s %-46s %-44s %-7s %5s\n' "bug" "file:line" "selection" "result" "s"
printf '%s\n' "${rows[@]}"
if [ "$broken" = 1 ]; then echo "planted_bugs: some entries of the list are broken (see above)" >&2; exit 2; fi
if [ "$missed" = 1 ]; then echo "planted_bugs: some planted bugs were MISSED: a test is missing" >&2; exit 1; fi
echo "planted_bugs: every planted bug was caught"

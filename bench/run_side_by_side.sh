#!/usr/bin/env bash
# zerodl's ZeRO stages next to their PyTorch equivalents, the same model and batches on the same
# CPU ranks (docs/walkthrough.md, "Side by side"): train_gpt under mpirun at stages 0-3, and
# PyTorch (PyPI's, in the venv of bench/setup_torch_venv.sh) under DDP, DDP +
# ZeroRedundancyOptimizer, FSDP2 fully_shard(reshard_after_forward=False / True) on gloo.
# Both start from one initial checkpoint exported by zerodl and read the same windows of the
# same text in the same order, so their losses agree to float rounding, step by step.
#   bash bench/run_side_by_side.sh [BUILD_DIR] [N...]       (default: build, N = 2 4)
# Model: the walkthrough's GPT (zero_bench_setup.sh: L=4, H=4, C=128, T=64, vocabulary 256,
# global batch 8, f32), or MODEL="--n-layer 6 --n-head 6 --n-embd 384 --seq 256 --batch 8"
# (train_gpt's flags); STEPS steps (default 30; LR, default 3e-3; warm-up 5, cosine), step times as
# medians after 3 steps, tokens/s from them, and the peak resident memory of the busiest rank's
# process. Without a PyTorch that has FSDP2 the PyTorch rows are skipped, saying so.
source "$(dirname "$0")/zero_bench_setup.sh" "$@"
source "$root/bench/torch_peer.sh"
if [ -n "${MODEL:-}" ]; then read -ra model <<<"$MODEL"; fi
flag() {  # the value of train_gpt flag $1 in the model, or $2
  local i
  for ((i = 0; i + 1 < ${#model[@]}; i++)); do [ "${model[i]}" = "$1" ] && { echo "${model[i + 1]}"; return; }; done
  echo "$2"
}
seq_len=$(flag --seq 64) batch=$(flag --batch 8)
steps=${STEPS:-30} lr=${LR:-3e-3}
train=("${model[@]}" --lr "$lr" --warmup 5 --steps "$steps" --eval-every 0)
py=""  # a torch with FSDP2's fully_shard (PyPI's 2.x; Debian's 1.13 has none)
if [ -n "$torch_py" ] && "$torch_py" -c "from torch.distributed.fsdp import fully_shard" 2>/dev/null; then
  py="$torch_py"
fi

echo "CPU: $cpu_desc; peer: ${py:+$torch_desc}"
# The shared start: one step at learning rate 0 changes nothing (AdamW's update, decay
# included, is multiplied by lr), so the checkpoint holds the initial weights.
"$build/examples/train_gpt" "${train[@]}" --steps 1 --lr 0 --save "$tmp/init_ck" >/dev/null
"$build/examples/consolidate_checkpoint" "$tmp/init_ck" "$tmp/init" >/dev/null
data="${TMPDIR:-/tmp}/zerodl-default-corpus.txt"  # the embedded corpus train_gpt wrote (data/default_corpus.h)

for n in "${ranks[@]}"; do
  per=$(( threads / n > 0 ? threads / n : 1 ))
  for stage in 0 1 2 3; do
    OMP_NUM_THREADS=$per "${mpirun[@]}" -np "$n" "$build/examples/train_gpt" "${train[@]}" --init-from "$tmp/init" \
      --data "$data" --zero-stage "$stage" --metrics "$tmp/z-$n-$stage.jsonl" --metrics-all-ranks >/dev/null
  done
  if [ -n "$py" ]; then
    (cd "$root/bench" && "$py" torch_side_by_side.py --init "$tmp/init" --data "$data" --ranks "$n" \
      --seq "$seq_len" --batch "$batch" --threads "$threads" --steps "$steps" --warm "$warm" --warmup 5 --lr "$lr") >"$tmp/t-$n.jsonl" ||
      echo "run_side_by_side: PyTorch's run at N = $n failed: the modes it finished are shown, the rest are missing" >&2
    torch_version=$("$py" -c "import torch; print(torch.__version__)")
  else
    echo "(no PyTorch with FSDP2: bash bench/setup_torch_venv.sh installs one; PyTorch rows skipped)"
    : >"$tmp/t-$n.jsonl"
    torch_version=""
  fi
  python3 - "$tmp" "$n" "$warm" "$torch_version" "$(( batch * seq_len ))" <<'PY'
import glob, json, statistics, sys
tmp, n, warm, tv, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
rows = []
for stage, name in enumerate(("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3")):
    files = sorted(glob.glob(f"{tmp}/z-{n}-{stage}*.jsonl"))  # rank 0's, then .rank<r>
    per_rank = [[json.loads(l) for l in open(f) if '"tokens_per_s"' in l] for f in files]
    assert len(per_rank) == n, f"expected {n} metrics files, found {files}"
    m = per_rank[0]
    mem = m[-1]["mem"]
    rss = max(r[-1]["mem"]["process_peak_rss"] for r in per_rank) / 2**20
    rows.append((f"zerodl {name}", [r["loss"] for r in m], statistics.median(r["ms"] for r in m[warm:]),
                 [mem[k] / 2**20 for k in ("param", "grad", "optim")], rss))
names = {"ddp": "DDP", "zero1": "DDP + ZeroRedundancyOptimizer", "fsdp2_keep": "FSDP2 reshard_after_forward=False",
         "fsdp2_reshard": "FSDP2 reshard_after_forward=True"}
for line in open(f"{tmp}/t-{n}.jsonl"):
    t = json.loads(line)
    rows.append((f"torch {names[t['mode']]}", t["losses"], t["step_ms"], t["states_mib"], t["peak_rss_mib"]))
ref = rows[0][1]
mid = min(9, len(ref) - 1)
print(f"\nN = {n} ranks, {len(ref)} steps" + (f"; PyTorch {tv}" if tv else ""))
print(f"{'run':<40} {'loss@1':>7} {'loss@' + str(mid + 1):>7} {'loss@' + str(len(ref)):>7} {'max|dloss|':>10} "
      f"{'step_ms':>7} {'tok/s':>7} {'peak RSS':>8}  param/grad/optim MiB (rank 0)")
# Rounding drifts by ~1e-4 over the first ten steps; a different batch or init shows at once
# (> 0.01). Later, a loss spike (larger models at this learning rate) amplifies rounding into
# chaos: there every run, torch's among themselves too, may drift apart by far more.
early = min(10, len(ref))
worst = worst_early = 0.0
for name, losses, ms, st, rss in rows:
    d = max(abs(a - b) for a, b in zip(losses, ref))
    worst = max(worst, d)
    worst_early = max(worst_early, max(abs(a - b) for a, b in zip(losses[:early], ref[:early])))
    print(f"{name:<40} {losses[0]:7.4f} {losses[mid]:7.4f} {losses[-1]:7.4f} {d:10.2e} {ms:7.1f} "
          f"{tokens / (ms / 1000):7.0f} {rss:8.1f}  {st[0]:6.2f} / {st[1]:6.2f} / {st[2]:6.2f}")
print("max|dloss|: the largest difference from zerodl DDP's loss, over all steps. tok/s: the global batch's")
print("tokens over the median step. peak RSS: MiB, the largest peak resident memory of any rank's process")
print("(libraries included: PyTorch's alone are a few hundred MiB). States: at the end of the last step,")
print("before zero_grad; zerodl's from its memory ledger, PyTorch's from the tensors each rank holds.")
if worst_early > 1e-3:
    sys.exit(f"run_side_by_side: the runs disagree by {worst_early:.2e} (> 1e-3) within the first {early} steps: "
             "not the same model, data or optimizer")
if worst > 1e-3:
    print(f"The runs agree to {worst_early:.1e} over the first {early} steps, then drift apart (by up to {worst:.2e}):")
    print("training turned chaotic (a loss spike amplifies float rounding); a smaller LR= keeps the runs together.")
PY
done

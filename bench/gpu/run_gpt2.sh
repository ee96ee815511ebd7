#!/usr/bin/env bash
# GPT-2 124M training on one GPU: zerodl (train_gpt --device cuda, ZeRO stage 0 and stage 3 at
# N = 1 on NCCL, bf16 compute with f32 masters, AdamW, clipping) next to PyTorch on the same GPU in the
# same run (bench/gpu/torch_gpt2.py: eager and torch.compile, bf16 autocast, fused AdamW, SDPA).
# Prints a table: impl, tokens/s, MFU (llm.c's 6N + 6LCT flops per token over the GPU's peak
# bf16 rate), peak memory (zerodl: its memory ledger on the GPU; torch: max_memory_allocated),
# ratio of tokens/s to torch.compile; and ZeRO-3 / stage-0 step time.
#
#   bash bench/gpu/run_gpt2.sh [BUILD_DIR]        # default build-gpu (scripts/gpu_check.sh passes its own)
#
# Model: L=12, H=12, C=768, T=1024, vocabulary 50257 padded to 50304 (--vocab-size 50257
# --vocab-multiple 128); the data are random bytes (ids < 256 of that vocabulary: the speed does
# not depend on which ids they are). Environment (optional): ZDL_BENCH_BATCH (16 sequences),
# ZDL_BENCH_WARMUP (3 steps, not timed), ZDL_BENCH_STEPS (10 timed steps), ZDL_BENCH_TORCH=0 (no
# PyTorch), ZDL_BENCH_COMPILE=0 (no torch.compile: it takes a minute), ZDL_BENCH_PEAK_TFLOPS (the
# GPU's peak when its name is not in the table).
#
# Exit status: 0 when every run it started worked, and also when there is no GPU (it says so and
# measures nothing); 1 when a run failed or train_gpt is missing.
set -uo pipefail
NAME=run_gpt2
source "$(dirname "$0")/common.sh"
B="${ZDL_BENCH_BATCH:-16}"
T=1024
W="${ZDL_BENCH_WARMUP:-3}"
S="${ZDL_BENCH_STEPS:-10}"
if ! "$exe" --help 2>&1 | grep -- "--device" >/dev/null; then
  echo "run_gpt2: $exe has no --device flag"
  exit 1
fi
gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
echo "run_gpt2: GPT-2 124M, batch $B x $T, bf16, $W warm-up + $S timed steps on $gpu"

peak_args=()
[ -n "${ZDL_BENCH_PEAK_TFLOPS:-}" ] && peak_args=(--peak-tflops "$ZDL_BENCH_PEAK_TFLOPS")
failed=0
rows="$work/rows.jsonl"
: >"$rows"

# zerodl STAGE: one train_gpt run; its metrics file gives the timed steps' numbers.
zerodl() {
  local stage=$1 m="$work/zero$1.jsonl"
  # One rank on NCCL: the collectives' real code path (the local backend only copies).
  echo "+ train_gpt --device cuda --zero-stage $stage --dist-backend nccl ..."
  if ! "$exe" --device cuda --zero-stage "$stage" --dist-backend nccl --dtype bf16 --data "$work/data.bin" "${GPT2[@]}" \
      --batch "$B" --steps $((W + S)) --warmup 2 \
      --lr 6e-4 --grad-clip 1.0 --eval-every 0 --log-every 1 --metrics "$m" "${peak_args[@]}" 2>&1 | tail -n 4; then
    echo "run_gpt2: zerodl stage $stage failed"
    failed=1
    return
  fi
  "$PY" - "$m" "$W" "zerodl zero$stage" >>"$rows" <<'EOF'
import json, sys
path, warm, impl = sys.argv[1], int(sys.argv[2]), sys.argv[3]
steps = [j for j in map(json.loads, open(path)) if "tokens_per_s" in j]
timed = [j for j in steps if j["step"] > warm]
ms = sum(j["ms"] for j in timed)
tokens = sum(j["tokens_per_s"] * j["ms"] / 1000 for j in timed)
tps = tokens / (ms / 1000)
# MFU is tokens/s times a constant (flops per token over the peak): the step's ratio scales.
mfu = timed[0]["mfu"] / timed[0]["tokens_per_s"] * tps if "mfu" in timed[0] else None
print(json.dumps({"impl": impl, "tokens_per_s": tps, "step_ms": ms / len(timed), "mfu": mfu,
                  "peak_mem_bytes": max(j["mem"]["peak"] for j in steps), "loss": timed[-1]["loss"]}))
EOF
}

torch_run() {
  local impl="torch eager" args=()
  [ "$1" = compile ] && { impl="torch.compile"; args=(--compile); }
  echo "+ torch_gpt2.py ${args[*]}"
  local line
  if line="$("$PY" "$root/bench/gpu/torch_gpt2.py" --batch "$B" --seq "$T" --steps "$S" --warmup "$W" "${args[@]}" \
      ${ZDL_BENCH_PEAK_TFLOPS:+--peak-tflops "$ZDL_BENCH_PEAK_TFLOPS"} 2>"$work/torch_$1.err" | tail -n 1)" &&
      [ -n "$line" ]; then
    echo "$line"
    if grep -q '"error"' <<<"$line"; then return; fi  # no PyTorch / no CUDA in torch: no peer, not a failure
    echo "$line" >>"$rows"
  else
    echo "run_gpt2: $impl failed:"
    tail -n 5 "$work/torch_$1.err"
    failed=1
  fi
}

zerodl 0
zerodl 3
if [ "${ZDL_BENCH_TORCH:-1}" != 0 ]; then
  torch_run eager
  [ "${ZDL_BENCH_COMPILE:-1}" != 0 ] && torch_run compile
fi

"$PY" - "$rows" "$gpu" "$B" "$T" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
gpu, B, T = sys.argv[2], sys.argv[3], sys.argv[4]
by = {r["impl"]: r for r in rows}
ref = by.get("torch.compile")
print(f"\nGPT-2 124M (L=12, H=12, C=768, T={T}, V=50257->50304), batch {B}, bf16, on {gpu}")
print(f"{'impl':<16} {'tokens/s':>10} {'step_ms':>9} {'MFU':>7} {'peak_GiB':>9} {'vs compile':>11}")
for r in rows:
    mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") is not None else "-"
    ratio = f"{r['tokens_per_s'] / ref['tokens_per_s']:.2f}x" if ref else "-"
    print(f"{r['impl']:<16} {r['tokens_per_s']:>10.0f} {r['step_ms']:>9.1f} {mfu:>7} "
          f"{r['peak_mem_bytes'] / 2**30:>9.2f} {ratio:>11}")
z0, z3 = by.get("zerodl zero0"), by.get("zerodl zero3")
if z0 and z3:
    print(f"N=1: ZeRO-3 / stage 0 step time = {z3['step_ms'] / z0['step_ms']:.2f}")
EOF
exit "$failed"

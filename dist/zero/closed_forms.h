// The ZeRO paper's closed forms, evaluated for this implementation: model-state bytes per rank
// and bytes on the wire per step, by stage. The walkthrough prints them next to what the
// ledgers measured; the tests assert the ledgers equal them. One definition for both.
//
// P is the padded parameter count (each unit padded to a multiple of N; the padding, < N per
// unit, is the only difference from the paper's Psi). s = bytes per compute element (4 f32,
// 2 bf16); k = optimizer bytes per element (Adam's m and v: 8; with bf16 compute also the f32
// master: 12, the paper's K).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/memory.h"
#include "dist/comm/comm_ledger.h"
#include "dist/zero/options.h"

namespace zdl::dist {

struct ElementBytes {
  int64_t s, k;
  static ElementBytes of(DType compute) { return compute == DType::BF16 ? ElementBytes{2, 12} : ElementBytes{4, 8}; }
};

// Model-state bytes on one rank after a step, per memory-ledger category:
//   DDP: params sP, grads sP, optimizer kP        ZeRO-1: optimizer kP/N
//   ZeRO-2: + gradients sP/N (a shard)            ZeRO-3: + parameters sP/N (a shard)
// Categories not listed hold 0 bytes.
std::map<MemoryCategory, int64_t> state_bytes_closed_form(ZeroStage stage, int64_t P, int64_t N, ElementBytes e);

// One collective of a step, per (kind, phase): `calls` (one per unit), payload and wire bytes.
struct ExpectedTraffic {
  CollectiveKind kind;
  CommPhase phase;
  int64_t calls, payload, wire;
  std::string formula;  // of the wire bytes
};

// A step without gradient accumulation: DDP all-reduces sP (wire 2 sP (N-1)/N); ZeRO-1/2
// reduce-scatter sP and all-gather sP after the step (2 Psi); ZeRO-3 all-gathers sP in forward
// and again in backward and reduce-scatters sP (3 Psi); wire = payload (N-1)/N. Stages 1-3 on
// N > 1 ranks add the all-reduce of the gradient norm's exact square (phase Other).
std::vector<ExpectedTraffic> traffic_closed_form(ZeroStage stage, int64_t P, int64_t units, int64_t N, ElementBytes e);

// Activation bytes a GPT block keeps from its forward for its backward (f32 on the CPU), for a
// batch of `batch` sequences of `seq` tokens: the forward of L blocks keeps L times this. Counted from
// the ops: ln_1's output C, q k v in head-major copies 3C, the attention output C with its
// log-sum-exp NH, the output back in [T, C] layout C, the residual sum C, ln_2's output C, c_fc's
// output 4C and GELU's 4C, the block's output C, and two LayerNorms' mean and 1/std 4:
//   per token (17 C + NH + 4) s.
// A block under activation checkpointing keeps its input alone, C s per token; its activations
// exist again only while its backward recomputes it, one block at a time.
struct BlockActivations {
  int64_t kept;          // bytes a block keeps from forward to backward
  int64_t checkpointed;  // the same block under activation checkpointing (its input)
};
BlockActivations block_activation_bytes(int64_t batch, int64_t seq, int64_t n_embd, int64_t n_head, int64_t s);

}  // namespace zdl::dist

// A latency-bandwidth model of ZeRO-3's overlap: does a unit's all-gather, issued one unit ahead
// (--prefetch 1), finish while the unit before it computes? The comparison is per block, for a
// GPT at N ranks on a stated link and compute rate; zero_predict prints it (docs/walkthrough.md,
// "When prefetch hides a gather").
//
// Ring collectives over N ranks move a buffer of B bytes in N - 1 steps of B / N each, so
//   t(all-gather) = t(reduce-scatter) = (N - 1) (latency + B / (N bandwidth)).
// A block's forward is 24 C^2 + 4 T C floating-point operations a token (its four weight GEMMs,
// 2 x 12 C^2, and attention's two T x T x C products, causal or not: the kernels compute the
// full square), its backward twice that (three times under activation checkpointing: the
// recompute). With prefetch the forward hides the next block's gather when t(forward) >=
// t(all-gather); the backward has to cover the next gather and this block's reduce-scatter on
// the same link. A deeper prefetch starts gathers earlier but moves no more bytes per block, so
// in a steady state the comparison is the same. Without prefetch every gather waits in full (the
// reduce-scatter still runs under the next block's backward). What is not hidden is exposed.
#pragma once
#include <cstdint>

namespace zdl::dist {

struct LinkModel {
  double latency_s = 0;     // per message
  double bytes_per_s = 0;   // per rank, one direction
};

// t of a ring all-gather (or reduce-scatter) of a `bytes` buffer over N ranks (0 at N = 1).
double ring_collective_seconds(int64_t bytes, int64_t N, const LinkModel& link);

// Floating-point operations of one block's forward, per token.
double block_forward_flops_per_token(int64_t seq, int64_t n_embd);

struct BlockOverlap {
  double forward_s = 0, backward_s = 0;       // one block's compute for `tokens` tokens
  double gather_s = 0, reduce_scatter_s = 0;  // one block's collectives
  double forward_exposed_s = 0;   // prefetch: max(0, gather - forward); none: the gather
  double backward_exposed_s = 0;  // prefetch: max(0, gather + reduce-scatter - backward);
                                  // none: the gather + max(0, reduce-scatter - backward)
  // The fewest tokens per rank per micro-step whose forward hides the gather (compute grows with
  // the tokens, the gather does not).
  double tokens_to_hide_forward = 0;
};

// One block of `block_bytes` (its parameters in the compute dtype: s x 12 C^2 + 13 C) computing
// `tokens` tokens per rank at `flops_per_s`; `prefetch`: units gathered ahead (0: none);
// `recompute`: the block is checkpointed.
BlockOverlap block_overlap(int64_t block_bytes, int64_t tokens, int64_t seq, int64_t n_embd, int64_t N,
                           double flops_per_s, const LinkModel& link, int prefetch, bool recompute);

}  // namespace zdl::dist

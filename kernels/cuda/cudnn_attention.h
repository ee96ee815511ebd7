// Causal scaled-dot-product attention through cuDNN's fused flash attention (the cuDNN
// frontend's SDPA graphs), forward and backward, for builds with ZDL_WITH_CUDNN_FRONTEND
// (cmake/ZdlCudnn.cmake). Same contract as kernels/cuda/attention.h, whose kernels stay the
// fallback and the oracle:
//   out = softmax(q k^T / sqrt(HS) + causal mask) v,   stats[i] = log sum_{j<=i} exp(s_ij)
// (cuDNN's softmax statistics are the log-sum-exp the fallback calls lse, natural log, f32).
//
// Layout: every [B, NH, T, HS] operand is read or written through its own element strides, so
// q, k, v come in as views of the fused [B, T, 3C] projection (strides {T*3C, HS, 3C, 1}), out
// and dout (one layout) can be [B, T, NH, HS] in memory (strides {T*C, HS, C, 1}: the [B, T, C]
// the output projection reads), and dq, dk, dv (one layout) can be written side by side into one
// [B, T, 3C] gradient; a stride set left all zero means contiguous [B, NH, T, HS]. stats is contiguous [B, NH, T] f32.
// Every pointer must be 16-byte aligned (cuDNN's vector loads; checked by the frontend at
// execution).
// Precision: bf16 in and out, f32 scores, softmax and statistics; the probabilities enter the
// P v and dS products as bf16, as in every flash attention (docs/cuda.md gives the tolerances).
// The backward uses cuDNN's deterministic algorithm: the same inputs give the same bits (on
// Hopper its workspace holds dP, 2 B NH T^2 bytes; docs/cuda.md).
//
// Graphs: one per (shape, strides, dtype, pass), built on first use (SdpaCaller says which
// calls may build) and kept per (host thread, device) with that thread's cuDNN handle, which
// runs on the compute stream. A shape cuDNN refuses (any frontend or cuDNN error while
// building) is remembered as refused and printed once to stderr with the reason; the caller
// then uses the fallback kernels. Errors while executing throw zdl::Error naming the call and
// the status.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "core/dtype.h"

namespace zdl::kernels::cuda {

// One attention problem: q, k, v [b, nh, t, hs] with their element strides; the strides of out
// and dout (one layout: the forward writes out, the backward reads both) and of dq, dk, dv (one
// layout, three pointers). All zero: contiguous.
struct SdpaProblem {
  DType dtype = DType::BF16;
  int64_t b = 0, nh = 0, t = 0, hs = 0;
  std::array<int64_t, 4> q_stride{}, k_stride{}, v_stride{};
  std::array<int64_t, 4> o_stride{}, dqkv_stride{};
};

enum class SdpaPass { Forward, Backward };

// Who asks for a graph, which decides whether a missing one is built.
enum class SdpaCaller {
  Training,   // a call that needs gradients, or a checkpointed forward that will: builds what is missing
  Inference,  // no gradients (evaluation, sampling): builds forward
              // graphs for at most kCudnnInferenceShapes new shapes per thread and device, so a
              // sampler, whose length grows by one token per call, does not build one per length
};
constexpr int kCudnnInferenceShapes = 4;

// False when the environment sets ZDL_CUDNN_ATTENTION=0 (read at every call, for A/B runs).
bool cudnn_attention_enabled();

// The workspace bytes the graph of (p, pass) needs on this thread's current device, building
// the graph first if none exists and `caller` may build it. nullopt: cuDNN refused the problem
// (printed once), or no graph exists and none may be built.
std::optional<size_t> cudnn_attention_plan(const SdpaProblem& p, SdpaPass pass, SdpaCaller caller);

// Forward through the graph cudnn_attention_plan(p, Forward, ...) made (throws if none).
// `workspace`: that many bytes (may be null when 0).
void cudnn_attention_forward(const SdpaProblem& p, const void* q, const void* k, const void* v, void* out,
                             float* stats, void* workspace);

// Backward: dq, dk, dv from q, k, v (strided as in p), out, dout and the forward's stats.
void cudnn_attention_backward(const SdpaProblem& p, const void* q, const void* k, const void* v, const void* out,
                              const void* dout, const float* stats, void* dq, void* dk, void* dv, void* workspace);

// Process-wide counts, for tests and benchmarks: graphs built and refused, graphs run.
struct CudnnAttentionCounters {
  int64_t graphs_built = 0, graphs_refused = 0, forward_runs = 0, backward_runs = 0;
};
CudnnAttentionCounters cudnn_attention_counters();

}  // namespace zdl::kernels::cuda

// Causal scaled-dot-product attention on CUDA, forward and backward; the CPU twin
// (kernels/cpu/attention.h) is the test oracle and defines the saved state:
//   out = softmax(q k^T / sqrt(HS) + causal mask) v,   lse[i] = log sum_{j<=i} exp(s_ij)
// q, k, v, out, dout, dq, dk, dv: contiguous [BNH, T, HS] of f32 or bf16; lse: [BNH, T] f32.
// Backward recomputes the probabilities from lse (O(T) saved memory, see [Note: what
// attention saves] in kernels/cpu/attention.h).
//
// A simple, correct kernel, not a fast one:
// - Forward: one warp per query row i with an online softmax over keys j <= i; the 32 lanes
//   split the head dim (lane l holds elements l, l + 32, ...: coalesced loads), each score is
//   a warp-shuffle dot product, accumulation in f32.
// - Backward, deterministic (no float atomics; every sum in a fixed order):
//   1. D_i = dO_i . O_i, a warp per row;
//   2. dQ_i = scale sum_{j<=i} dS_ij k_j, a warp per query row;
//   3. dK_j = scale sum_{i>=j} dS_ij q_i and dV_j = sum_{i>=j} P_ij dO_i, a warp per key row;
//   with P_ij = exp(s_ij - lse_i), dS_ij = P_ij (dO_i . v_j - D_i).
// In builds with the cuDNN frontend, bf16 attention runs on cuDNN's fused flash attention
// instead (kernels/cuda/cudnn_attention.h: the same lse, as cuDNN's softmax statistics); these
// kernels stay for f32, for shapes cuDNN does not take, and as its oracle.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace zdl::kernels::cuda {

// Largest head size the kernels take (each lane keeps HS / 32 elements in registers).
constexpr int64_t kAttentionMaxHeadSize = 128;

// lse may be null (inference: nothing saved). Throws for HS outside [1, 128].
void causal_attention_forward(DType dtype, int64_t bnh, int64_t t, int64_t hs, const void* q, const void* k,
                              const void* v, void* out, float* lse);

// Device bytes of workspace causal_attention_backward needs (the D_i row dots, f32).
size_t attention_backward_workspace_bytes(int64_t bnh, int64_t t);

// Gradients of causal_attention_forward given its q, k, v, out and lse and dout; dq, dk, dv
// are overwritten. `workspace`: attention_backward_workspace_bytes(bnh, t) bytes.
void causal_attention_backward(DType dtype, int64_t bnh, int64_t t, int64_t hs, const void* q, const void* k,
                               const void* v, const void* out, const float* lse, const void* dout, void* dq, void* dk,
                               void* dv, void* workspace);

}  // namespace zdl::kernels::cuda

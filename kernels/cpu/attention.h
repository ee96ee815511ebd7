// Causal scaled-dot-product attention on contiguous CPU buffers, forward and backward.
// Pure functions on buffers; the differentiable op is autograd/ops/attention.cpp.
//
// All tensors are contiguous [BNH, T, HS] (BNH = B * NH (b, h) pairs flattened), lse is [BNH, T].
//   out = softmax(q k^T / sqrt(HS) + causal mask) v,   lse[i] = log sum_{j<=i} exp(s_ij)
//
// [Note: what attention saves] The forward saves the output and the per-row logsumexp of the
// scaled scores (flash-attention style), not the probabilities P. Backward recomputes the
// needed P blocks as exp(s - lse): one extra Q K^T product, but O(T) saved memory per (b, h)
// instead of O(T^2) (GPT-2 small at T=1024: 48 KiB of lse vs 48 MiB of P per sequence and
// layer), and the activation memory of a block then grows linearly with T like everything else.
//
// The caller owns all scratch memory: it asks attention_*_workspace() for a size, allocates
// it (tagged as Workspace in the memory ledger), and passes it in with the same thread count.
//
//   int nt = attention_threads(bnh, t, hs);
//   std::vector<float> work(attention_forward_workspace<float>(bnh, t, hs, nt));
//   causal_attention_forward<float>(bnh, t, hs, q, k, v, out, lse, nt, work.data());
//
// T: float, double, BFloat16. bf16 buffers compute in f32 (compute_type.h): lse and the
// workspace are f32, and the results are the f32 kernel's on the same values, rounded once.
#pragma once
#include <cstdint>

#include "kernels/cpu/compute_type.h"

namespace zdl::kernels::cpu {

// Query rows per block. A block of rows multiplies only against the keys its last row can
// see, so the masked upper triangle costs at most half a block per row.
constexpr int64_t kAttentionRowBlock = 64;

// Threads worth using for this problem size (1 for tiny problems).
int attention_threads(int64_t bnh, int64_t t, int64_t hs);

// Scratch elements (of compute_t<T>) the kernels need when run with `threads` threads.
template <class T>
int64_t attention_forward_workspace(int64_t bnh, int64_t t, int64_t hs, int threads);
template <class T>
int64_t attention_backward_workspace(int64_t bnh, int64_t t, int64_t hs, int threads);

// q, k, v, out: [BNH, T, HS]; lse: [BNH, T] or null (inference: nothing saved for backward).
template <class T>
void causal_attention_forward(int64_t bnh, int64_t t, int64_t hs, const T* q, const T* k, const T* v, T* out,
                              compute_t<T>* lse, int threads, compute_t<T>* work);

// Gradients of causal_attention_forward, given its q, k, v, out and lse and dout = dL/dout.
// dq, dk, dv: [BNH, T, HS], overwritten.
template <class T>
void causal_attention_backward(int64_t bnh, int64_t t, int64_t hs, const T* q, const T* k, const T* v, const T* out,
                               const compute_t<T>* lse, const T* dout, T* dq, T* dk, T* dv, int threads,
                               compute_t<T>* work);

}  // namespace zdl::kernels::cpu

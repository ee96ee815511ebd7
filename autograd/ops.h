// Differentiable operations on Tensors. Each op's forward sits next to its backward in
// autograd/ops/<family>.cpp and calls kernels/ for the arithmetic. All ops check shapes,
// dtypes and devices up front and throw zdl::Error naming both sides.
//
//   Tensor h = zdl::gelu(zdl::linear(x, w1, b1));           // [B,T,4C]
//   Tensor loss = zdl::cross_entropy(logits.reshape({B*T, V}), targets.reshape({B*T}));
//   loss.backward();
//
// Dtypes: f32 and f64 everywhere; bf16 too. On the CPU a bf16 op casts its inputs to f32,
// computes there and casts the result back (autograd/ops/bf16_compute.h), so its gradients are
// bf16 again; cross_entropy of bf16 logits returns an f32 loss. All floating arguments of one
// op must share a dtype (mixed bf16/f32 throws naming both).
//
// Devices: all tensor arguments of one op must be on one device (else an error naming both).
// On CUDA (f32 and bf16; kernels/cuda/) the elementwise ops, reductions, views, matmul and
// linear compute natively: bf16 in and out, f32 arithmetic inside, one rounding per result.
//
// Shape alphabet: B batch, T time, C channels, NH heads, HS head size, V vocab.
#pragma once
#include <cstdint>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/tensor.h"

namespace zdl {

// ---- elementwise with broadcasting (autograd/ops/elementwise.cpp) ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double s);
Tensor mul(const Tensor& a, double s);
Tensor rsub(double s, const Tensor& a);  // s - a
Tensor rdiv(double s, const Tensor& a);  // s / a
Tensor neg(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor tanh(const Tensor& a);
Tensor square(const Tensor& a);
Tensor relu(const Tensor& a);     // max(a, 0); gradient 0 at 0
Tensor sigmoid(const Tensor& a);  // 1 / (1 + exp(-a))
Tensor silu(const Tensor& a);     // a * sigmoid(a)
Tensor abs(const Tensor& a);      // gradient sign(a), 0 at 0
// Elementwise max / min with broadcasting; a NaN in either propagates. On a tie each input
// gets half the gradient (as PyTorch).
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
// cond != 0 ? a : b, broadcasting all three (cond of any float dtype; cast to a's). The
// unselected side's values never reach the result or its gradient (an Inf there is harmless).
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// Index of the largest element along `dim` (the first on ties; a NaN wins): shape a without
// that dim, I64, no gradient.
Tensor argmax(const Tensor& a, int64_t dim = -1);
// Differentiable dtype cast (e.g. f32 master weights -> bf16 compute copy).
Tensor cast(const Tensor& a, DType dtype);
// In place, no graph: dst += src (src broadcast to dst's shape; dst may be a strided view).
// For gradient accumulation. bf16 adds in f32 and rounds to nearest even on store.
void add_(const Tensor& dst, const Tensor& src);
// In place, no graph: dst *= s (dst contiguous). bf16 multiplies in f32, rounds on store.
void scale_(const Tensor& dst, double s);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator+(const Tensor& a, double s) { return add(a, s); }
inline Tensor operator-(const Tensor& a, double s) { return add(a, -s); }
inline Tensor operator*(const Tensor& a, double s) { return mul(a, s); }
inline Tensor operator/(const Tensor& a, double s) { return mul(a, 1.0 / s); }
inline Tensor operator+(double s, const Tensor& a) { return add(a, s); }
inline Tensor operator-(double s, const Tensor& a) { return rsub(s, a); }
inline Tensor operator*(double s, const Tensor& a) { return mul(a, s); }
inline Tensor operator/(double s, const Tensor& a) { return rdiv(s, a); }
inline Tensor operator-(const Tensor& a) { return neg(a); }

// The shape two shapes broadcast to (numpy rules); throws naming both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b);
// Sums g over broadcast dimensions so it has `shape` again (backward of broadcasting).
Tensor sum_to(const Tensor& g, const Shape& shape);

// ---- views and layout (autograd/ops/view.cpp) ----
// Views share storage when the layout allows; reshape copies only when it must.
Tensor reshape(const Tensor& a, const Shape& shape);  // one -1 allowed
Tensor view(const Tensor& a, const Shape& shape);     // never copies; throws if impossible
Tensor transpose(const Tensor& a, int64_t d0, int64_t d1);
Tensor permute(const Tensor& a, const std::vector<int64_t>& dims);
Tensor contiguous(const Tensor& a);  // `a` itself when already contiguous
Tensor unsqueeze(const Tensor& a, int64_t d);
Tensor squeeze(const Tensor& a, int64_t d);
// Broadcasts size-1 (or missing leading) dims to `shape` as a stride-0 view.
Tensor expand(const Tensor& a, const Shape& shape);
Tensor slice(const Tensor& a, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
std::vector<Tensor> split(const Tensor& a, int64_t split_size, int64_t dim);
std::vector<Tensor> split(const Tensor& a, const std::vector<int64_t>& sizes, int64_t dim);
Tensor cat(const std::vector<Tensor>& parts, int64_t dim);

// ---- reductions (autograd/ops/reduce.cpp) ----
Tensor sum(const Tensor& a);  // all elements -> shape []
Tensor sum(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& a);
Tensor mean(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim = false);

// ---- matrix products (autograd/ops/matmul.cpp) ----
// a [..., M, K] @ b [..., K, N] -> [..., M, N]. b may be 2-D (shared by every batch) or have
// the same leading dims as a.
Tensor matmul(const Tensor& a, const Tensor& b);
// x [..., in] @ weight[out, in]^T + bias[out] -> [..., out]  (bias may be undefined).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);
// linear(gelu(linear(x, w_fc, b_fc)), w_proj, b_proj), the transformer's MLP, as one op: on a
// GPU in bf16 the bias + GELU and its backward run in the GEMMs' epilogues ([Note: GELU in the
// GEMM's epilogue], kernels/cuda/matmul.h); elsewhere it is those three ops.
Tensor gelu_mlp(const Tensor& x, const Tensor& w_fc, const Tensor& b_fc, const Tensor& w_proj, const Tensor& b_proj);

// ---- neural-network ops (autograd/ops/nn.cpp) ----
Tensor gelu(const Tensor& x);  // tanh approximation, as GPT-2
// Normalizes over the last dim: (x - mean) / sqrt(var + eps) * weight + bias.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
Tensor softmax(const Tensor& x, int64_t dim = -1);
// Embedding lookup: weight [V, C], ids (i32/i64, any shape S) -> [S..., C]. Backward
// accumulates rows (repeated ids add up). Out-of-range ids throw.
Tensor embedding(const Tensor& weight, const Tensor& ids);
// Mean cross-entropy of logits [N, V] against targets [N] (i32/i64); targets equal to
// ignore_index are skipped. Fused: softmax and loss in one pass, backward from saved stats.
// The loss has the logits' dtype, except for bf16 logits: then it is f32. num_classes > 0: the
// classes are the first num_classes columns of a wider (padded) row, which no slice copies: the
// padding is never read and its gradient is 0. The gradient is written over the logits when
// nothing else holds them (the LM head's [B T, V] buffer is then not allocated twice).
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -1, int64_t num_classes = 0);
// Inverted dropout with probability p; the mask of element i is a pure function of
// (seed, stream, offset + i), so it is reproducible and shardable: a slice of a larger tensor
// passes its first element's flat index as offset and gets that slice of the larger mask.
// Identity when !training or p == 0.
Tensor dropout(const Tensor& x, double p, bool training, uint64_t seed, uint64_t stream, int64_t offset = 0);

// ---- attention (autograd/ops/attention.cpp) ----
// Causal scaled-dot-product attention: q, k, v [B, NH, T, HS] -> [B, NH, T, HS];
// softmax(q k^T / sqrt(HS) + causal mask) v.
Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v);

}  // namespace zdl

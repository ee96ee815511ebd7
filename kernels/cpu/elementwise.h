// Elementwise CPU kernels: broadcasting binary ops over strided operands, and unary maps over
// contiguous buffers. Pure functions on buffers; the differentiable ops are in
// autograd/ops/elementwise.cpp.
//
// Every kernel exists for f32 and f64; binary, accumulate and scale also for bf16, computing
// in f32 and rounding to nearest even once on store (compute_type.h), so a bf16 result has the
// bits of the f32 kernel's, rounded. (The unary maps compose their backward from several ops,
// which in bf16 would round at each: those ops compute bf16 in f32, autograd/ops/bf16_compute.h.)
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "core/strided_loop.h"

namespace zdl::kernels::cpu {

enum class BinaryOp {
  Add, Sub, Mul, Div,
  Max, Min,          // NaN propagates (as PyTorch's maximum / minimum)
  MaxGrad, MinGrad,  // d max(a, b) / da: 1 where a wins, 1/2 on a tie, else 0 (min: likewise)
};

// out[idx] = a[idx] op b[idx] over `it` (operand order: out, a, b; broadcast dims have stride 0).
template <class T>
void binary(BinaryOp op, const StridedRows<3>& it, T* out, const T* a, const T* b);

enum class UnaryOp {
  Neg, Exp, Log, Sqrt, Tanh, Square,
  AddScalar,  // x + s
  MulScalar,  // x * s
  RSub,       // s - x
  RDiv,       // s / x
  Relu, Sigmoid, Silu, Abs,
};

// out[i] = f(x[i]) for contiguous buffers of n elements (out may alias x).
template <class T>
void unary(UnaryOp op, int64_t n, const T* x, T* out, double s = 0.0);

// dx[i] = g[i] * f'(x[i]) for the ops whose backward is one kernel (Relu, Sigmoid, Silu, Abs;
// the others compose their backward from differentiable ops in autograd/ops/elementwise.cpp).
template <class T>
void unary_backward(UnaryOp op, int64_t n, const T* g, const T* x, T* dx);

// out[idx] = cond[idx] != 0 ? a[idx] : b[idx] over `it` (operand order: out, cond, a, b).
template <class T>
void select(const StridedRows<4>& it, T* out, const T* cond, const T* a, const T* b);

// out[r] = the index of the largest of x[r n .. r n + n) (the first on ties; a NaN wins).
template <class T>
void argmax_rows(int64_t rows, int64_t n, const T* x, int64_t* out);

// dst[idx] += src[idx] over `it` (operand order: dst, src).
template <class T>
void accumulate(const StridedRows<2>& it, T* dst, const T* src);

// x[i] *= s for a contiguous buffer of n elements.
template <class T>
void scale(int64_t n, T* x, double s);

}  // namespace zdl::kernels::cpu

// Elementwise CPU kernels: broadcasting binary ops over strided operands, and unary maps over
// contiguous buffers. Pure functions on buffers; the differentiable ops are in
// autograd/ops/elementwise.cpp.
//
// binary/unary exist for f32 and f64 (differentiable bf16 ops compute in f32, see
// autograd/ops/bf16_compute.h). accumulate and scale, the in-place helpers behind gradient
// accumulation and gradient scaling, also take bf16 buffers directly: they compute in f32 and
// round to nearest even once on store.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "core/strided_loop.h"

namespace zdl::kernels::cpu {

enum class BinaryOp { Add, Sub, Mul, Div };

// out[idx] = a[idx] op b[idx] over `it` (operand order: out, a, b; broadcast dims have stride 0).
template <class T>
void binary(BinaryOp op, const StridedRows<3>& it, T* out, const T* a, const T* b);

enum class UnaryOp {
  Neg, Exp, Log, Sqrt, Tanh, Square,
  AddScalar,  // x + s
  MulScalar,  // x * s
  RSub,       // s - x
  RDiv,       // s / x
};

// out[i] = f(x[i]) for contiguous buffers of n elements (out may alias x).
template <class T>
void unary(UnaryOp op, int64_t n, const T* x, T* out, double s = 0.0);

// dst[idx] += src[idx] over `it` (operand order: dst, src). T: float, double, BFloat16.
template <class T>
void accumulate(const StridedRows<2>& it, T* dst, const T* src);

// x[i] *= s for a contiguous buffer of n elements. T: float, double, BFloat16.
template <class T>
void scale(int64_t n, T* x, double s);

}  // namespace zdl::kernels::cpu

// Elementwise CPU kernels: broadcasting binary ops over strided operands, and unary maps over
// contiguous buffers. Pure functions on buffers; the differentiable ops are in
// autograd/ops/elementwise.cpp.
#pragma once
#include <cstdint>

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

// dst[idx] += src[idx] over `it` (operand order: dst, src).
template <class T>
void accumulate(const StridedRows<2>& it, T* dst, const T* src);

}  // namespace zdl::kernels::cpu

// Elementwise CUDA kernels. The CPU twins in kernels/cpu/elementwise.h define the semantics and
// are the test oracle (tests/cuda/elementwise_cuda_test.cpp). Layered as llm.c/ggml do:
// __global__ kernel -> launcher taking a stream -> the checked, type-erased entry points below
// (DType + void*, so callers need no CUDA headers; CPU-only builds include this header only
// behind `#ifdef ZDL_WITH_CUDA`).
//
// Dtypes: f32 and bf16 (others throw naming the kernel). All arithmetic is f32; a bf16 result is
// rounded to nearest even once, on store. That is the CPU twins' bf16 behaviour (accumulate,
// scale) and the CPU ops' bf16 detour (cast to f32, compute, cast back), so a bf16 op on CUDA
// gives the CPU's bits up to the last-ulp differences of expf/logf/tanhf.
// Every kernel runs on the compute stream (kernels/cuda/common.cuh), asynchronous to the host.
// Pointers are device pointers to element 0 of each view; n counts elements.
//
// Strided entry points take the StridedRows<K> of core/strided_loop.h that the CPU twins take,
// coalesced by the caller (at most kMaxStridedDims dims left; see kernels/cuda/copy.h). A
// broadcast operand has stride 0 in the broadcast dims.
//
//   StridedRows<3> it;
//   it.shape = out_shape;
//   it.strides = {out.strides(), broadcast_strides(a, out_shape), broadcast_strides(b, out_shape)};
//   kernels::cuda::binary(BinaryOp::Mul, DType::BF16, coalesce(it), out.raw_data(), a.raw_data(), b.raw_data());
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "core/strided_loop.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cuda/copy.h"

namespace zdl::kernels::cuda {

// out[i] = a[i] op b[i] for n contiguous elements.
void binary(cpu::BinaryOp op, DType dtype, int64_t n, void* out, const void* a, const void* b);

// out[idx] = a[idx] op b[idx] over `it` (operand order: out, a, b), as cpu::binary. `out` must
// not overlap a or b unless it is the very same view (then each element is read before it is
// written by the same thread). Fully contiguous operands take the contiguous kernel.
void binary(cpu::BinaryOp op, DType dtype, const StridedRows<3>& it, void* out, const void* a, const void* b);

// out[i] = f(x[i]) for n contiguous elements, as cpu::unary (s: the scalar of AddScalar,
// MulScalar, RSub, RDiv, converted to f32 as the CPU converts it). out may alias x.
void unary(cpu::UnaryOp op, DType dtype, int64_t n, const void* x, void* out, double s = 0.0);

// The backward of unary in one pass: dx[i] = g[i] * f'(x[i]), from the op's *input* x, all in
// f32 (f recomputed where f' needs it: exp, tanh, rdiv), for n contiguous elements:
//   Neg: -g   Exp: g*exp(x)   Log: g/x   Sqrt: g/(2 sqrt(x))   Tanh: g*(1 - tanh(x)^2)
//   Square: g*x*2   AddScalar: g   MulScalar: g*s   RSub: -g   RDiv: -(g*(s/x))/x
//   Relu, Sigmoid, Silu, Abs: cpu::unary_backward's formulas
// Same formulas (and f32 rounding steps) as the CPU ops' backward graphs; a bf16 gradient is
// rounded once, as the CPU bf16 detour rounds its f32 gradient once. dx may alias g.
void unary_backward(cpu::UnaryOp op, DType dtype, int64_t n, const void* g, const void* x, void* dx, double s = 0.0);

// The b-gradient of a / b before its broadcast reduction (sum_to), in one pass:
// d[idx] = -((g[idx] / b[idx]) * (a[idx] / b[idx])) over `it` (operand order: d, g, a, b),
// the CPU graph's neg(mul(div(g, b), out)) with out = a / b, in f32 with the same rounding
// steps; a bf16 result is rounded once (the unfused graph would round three times).
void div_grad_b(DType dtype, const StridedRows<4>& it, void* d, const void* g, const void* a, const void* b);

// out[idx] = cond[idx] != 0 ? a[idx] : b[idx] over `it` (operand order: out, cond, a, b), as
// cpu::select.
void select(DType dtype, const StridedRows<4>& it, void* out, const void* cond, const void* a, const void* b);

// out[r] = the index of the largest of row r of x [rows, n] (contiguous; the first on ties, a
// NaN wins), as cpu::argmax_rows. out: rows int64 on the device.
void argmax_rows(DType dtype, int64_t rows, int64_t n, const void* x, int64_t* out);

// dst[idx] += src[idx] over `it` (operand order: dst, src), as cpu::accumulate: the gradient
// accumulation of the autograd engine and of ZeRO's flat buffers. Added in f32, rounded once.
// dst must not have overlapping elements (no stride-0 dims of size > 1: that would race).
void accumulate(DType dtype, const StridedRows<2>& it, void* dst, const void* src);

// x[i] *= s for n contiguous elements, as cpu::scale (s converted to f32, product rounded once).
void scale(DType dtype, int64_t n, void* x, double s);

// out[i] = (To)in[i] for f32 <-> bf16, n contiguous elements (round to nearest even).
void cast(DType from, DType to, int64_t n, const void* in, void* out);

// out[r, :] = row[:] for r < rows: out row-major [rows, cols] (contiguous), row [cols]
// contiguous. The twin of cpu::fill_rows: rows written before a GEMM accumulates onto them.
void fill_rows(DType dtype, int64_t rows, int64_t cols, const void* row, void* out);

}  // namespace zdl::kernels::cuda

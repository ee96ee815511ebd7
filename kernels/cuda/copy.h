// Layout copies and fills on one CUDA device: the CUDA twins of core/tensor.cpp's cpu_copy and
// fill_ (the CPU versions are the test oracle). core/tensor.cpp calls these for Tensor::copy_,
// contiguous_copy and fill_ of CUDA tensors; the strided elementwise kernels
// (kernels/cuda/elementwise.h) walk their operands with the same machinery.
//
// Operands are described as in core/strided_loop.h: a StridedRows<K> (iteration shape plus one
// element-stride vector per operand), coalesced by the caller with coalesce(). At most
// kMaxStridedDims dimensions may remain after coalescing (an error names the shape otherwise);
// coalescing leaves one dimension for any contiguous operand set and rarely more than four.
// Pointers are device pointers to element 0 of each view. Kernels run on the compute stream
// (kernels/cuda/common.cuh), asynchronously to the host.
//
// Plain C++ header (no CUDA includes), so .cpp files of CPU-only builds can include it behind
// `#ifdef ZDL_WITH_CUDA` without a CUDA toolkit.
//
//   StridedRows<2> it;
//   it.shape = dst.shape();
//   it.strides = {dst.strides(), src.strides()};
//   kernels::cuda::strided_copy(coalesce(it), dst.dtype(), dst.raw_data(), src.dtype(), src.raw_data());
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "core/strided_loop.h"

namespace zdl::kernels::cuda {

// Most dimensions a strided kernel walks (after coalescing).
constexpr int kMaxStridedDims = 12;

// dst[idx] = src[idx] over `it` (operand order: dst, src), converting the dtype as the CPU copy
// does: f32 <-> bf16 through f32 with round-to-nearest-even, every other pair through double
// (i32/i64 targets truncate toward zero). Same-dtype copies move raw element words (bit-exact,
// NaN payloads kept); a fully contiguous same-dtype copy is one cudaMemcpyAsync. `dst` must not
// overlap `src` (the CPU copy has the same rule).
void strided_copy(const StridedRows<2>& it, DType dst_dtype, void* dst, DType src_dtype, const void* src);

// dst[idx] = value over `it` (one operand), value converted to dtype exactly as the CPU fill_
// converts it (so the stored bits are the same).
void strided_fill(const StridedRows<1>& it, DType dtype, void* dst, double value);

}  // namespace zdl::kernels::cuda

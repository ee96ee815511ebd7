// Strided index math shared by the CUDA layout copy (copy.cu) and the strided elementwise
// kernels (elementwise.cu): the device-side form of core/strided_loop.h's StridedRows<K>.
//
// Each thread of a grid-stride loop takes a linear index i of the row-major walk over the
// (coalesced) iteration shape and turns it into one element offset per operand. The dims are
// stored innermost first and the loop is unrolled to kMaxStridedDims with an early break, so
// the shape and strides are read from kernel parameters at fixed positions (no local-memory
// copy, as with a runtime-indexed array). Index math is 32-bit unsigned when the element count
// and every operand's largest offset fit below 2^31 (integer division is much cheaper), 64-bit
// otherwise.
//
// Only included by .cu files (needs nvcc).
#pragma once
#include <cstdint>

#include "core/strided_loop.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/copy.h"

namespace zdl::kernels::cuda {

template <int K, class Index>
struct StridedIndex {
  int ndim;
  Index shape[kMaxStridedDims];       // innermost first
  Index strides[K][kMaxStridedDims];  // per operand, innermost first, in elements

  __device__ __forceinline__ void offsets(Index i, Index (&off)[K]) const {
#pragma unroll
    for (int k = 0; k < K; ++k) off[k] = 0;
#pragma unroll
    for (int d = 0; d < kMaxStridedDims; ++d) {
      if (d == ndim) break;
      const Index idx = i % shape[d];
      i /= shape[d];
#pragma unroll
      for (int k = 0; k < K; ++k) off[k] += idx * strides[k][d];
    }
  }
};

template <int K>
int64_t strided_numel(const StridedRows<K>& it) {
  int64_t n = 1;
  for (int64_t s : it.shape) n *= s;
  return n;
}

// True when 32-bit unsigned index math covers the walk: numel and every operand's largest
// element offset below 2^31, no negative strides.
template <int K>
bool strided_fits_32bit(const StridedRows<K>& it) {
  constexpr int64_t kLimit = int64_t{1} << 31;
  if (strided_numel(it) >= kLimit) return false;
  for (int k = 0; k < K; ++k) {
    int64_t max_off = 0;
    for (size_t d = 0; d < it.shape.size(); ++d) {
      if (it.strides[k][d] < 0) return false;
      if (it.shape[d] > 0) max_off += (it.shape[d] - 1) * it.strides[k][d];
    }
    if (max_off >= kLimit) return false;
  }
  return true;
}

template <int K, class Index>
StridedIndex<K, Index> make_strided_index(const StridedRows<K>& it, const char* what) {
  const int nd = static_cast<int>(it.shape.size());
  ZDL_CHECK(nd <= kMaxStridedDims, what, ": ", nd, " dimensions remain after merging contiguous ones (shape=",
            shape_str(it.shape), "); CUDA strided kernels walk at most ", kMaxStridedDims,
            ", make an operand contiguous first");
  for (int k = 0; k < K; ++k)
    ZDL_CHECK(it.strides[k].size() == it.shape.size(), what, ": operand ", k, " has ", it.strides[k].size(),
              " strides for shape=", shape_str(it.shape));
  StridedIndex<K, Index> s{};
  s.ndim = nd;
  for (int d = 0; d < nd; ++d) {
    s.shape[d] = static_cast<Index>(it.shape[nd - 1 - d]);
    for (int k = 0; k < K; ++k) s.strides[k][d] = static_cast<Index>(it.strides[k][nd - 1 - d]);
  }
  return s;
}

// Calls f(off) for every element of the walk, off[k] the element offset of operand k.
// F: a functor with `template <class I> __device__ void operator()(const I (&off)[K]) const`.
template <int K, class Index, class F>
__global__ void strided_kernel(Index n, StridedIndex<K, Index> idx, F f) {
  for (Index i = blockIdx.x * static_cast<Index>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<Index>(gridDim.x) * blockDim.x) {
    Index off[K];
    idx.offsets(i, off);
    f(off);
  }
}

// Launches strided_kernel over `it` on the compute stream with 32- or 64-bit index math;
// checks the launch. `what` names the caller in errors.
template <int K, class F>
void launch_strided(const StridedRows<K>& it, const F& f, const char* what) {
  const int64_t n = strided_numel(it);
  if (n == 0) return;
  if (strided_fits_32bit(it)) {
    strided_kernel<K, uint32_t><<<grid_for(n), kBlock, 0, compute_stream()>>>(
        static_cast<uint32_t>(n), make_strided_index<K, uint32_t>(it, what), f);
  } else {
    strided_kernel<K, int64_t><<<grid_for(n), kBlock, 0, compute_stream()>>>(n, make_strided_index<K, int64_t>(it, what),
                                                                               f);
  }
  ZDL_CUDA_CHECK_LAUNCH();
}

// True when every operand walks the whole (coalesced) space as one contiguous run.
template <int K>
bool strided_all_contiguous(const StridedRows<K>& it) {
  if (it.shape.size() != 1) return it.shape.empty();
  for (int k = 0; k < K; ++k)
    if (it.strides[k][0] != 1 && it.shape[0] != 1) return false;
  return true;
}

}  // namespace zdl::kernels::cuda

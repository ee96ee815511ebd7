// Shared pieces of the CUDA kernels (only included by .cu files):
//  - the stream every kernel runs on (compute_stream(), kernels/cuda/stream.h),
//  - grid sizing for grid-stride loops,
//  - f32 loads/stores of f32 and bf16 elements (all arithmetic is f32, as in the CPU twins'
//    bf16 path),
//  - 16-byte packs of elements for 128-bit loads and stores,
//  - warp and block sums/maxima,
//  - a dtype switch from the type-erased entry points (DType + void*) to typed launchers.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

#include "core/check.h"
#include "core/cuda_check.h"
#include "core/dtype.h"
#include "kernels/cuda/stream.h"

namespace zdl::kernels::cuda {

constexpr int kBlock = 256;

// Blocks for a grid-stride loop over n elements (capped: the loop covers the rest).
inline unsigned grid_for(int64_t n, int block = kBlock) {
  int64_t blocks = (n + block - 1) / block;
  if (blocks < 1) blocks = 1;
  return static_cast<unsigned>(blocks < 65535 * 16 ? blocks : 65535 * 16);
}

#define ZDL_GRID_STRIDE(i, n)                                                                 \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// bf16 bits -> f32: the bits shifted up, exact, and a NaN keeps its sign and payload (as
// core/dtype.h's BFloat16).
__device__ __forceinline__ float float_from_bf16_bits(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }
__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return float_from_bf16_bits(__bfloat16_as_ushort(x)); }
template <class T>
__device__ __forceinline__ T from_f(float x);
template <>
__device__ __forceinline__ float from_f<float>(float x) { return x; }
// f32 -> bf16 bits as core/dtype.h's BFloat16 does: round to nearest even, and a NaN keeps its
// sign and payload, made quiet (the hardware conversion returns one canonical NaN instead).
__device__ __forceinline__ uint16_t bf16_bits_from_float(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) {
  __nv_bfloat16_raw r;
  r.x = bf16_bits_from_float(x);
  return __nv_bfloat16(r);
}

// 16 bytes of elements (8 bf16 or 4 f32): one 128-bit load or store, where a warp's scalar
// 2-byte accesses would need eight instructions for the same bytes. Only for addresses that
// are 16-byte aligned (aligned16 on the host decides which kernel runs).
template <class T>
struct alignas(16) Pack {
  static constexpr int kN = 16 / static_cast<int>(sizeof(T));
  T v[kN];
};
template <class T>
__device__ __forceinline__ Pack<T> load_pack(const T* p) {
  return *reinterpret_cast<const Pack<T>*>(p);
}
template <class T>
__device__ __forceinline__ void store_pack(T* p, const Pack<T>& x) {
  *reinterpret_cast<Pack<T>*>(p) = x;
}
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
// Rows `row_elems` elements of T apart, from each of `bases`, all start on 16-byte boundaries.
template <class T>
bool rows_in_packs(int64_t row_elems, std::initializer_list<const void*> bases) {
  if ((row_elems * static_cast<int64_t>(sizeof(T))) % 16 != 0) return false;
  for (const void* p : bases)
    if (!aligned16(p)) return false;
  return true;
}

// out[i] = f(a[i]) (map1) or f(a[i], b[i]) (map2) over n elements, f in f32, grid-stride. kVec:
// every pointer is 16-byte aligned, and whole packs go by 128-bit accesses, the n % W tail one
// by one. Each element is read and written by one thread, so out may alias an input. Launch
// with map_grid<T>(n, kVec).
template <class T, bool kVec, class F>
__device__ __forceinline__ void map1(int64_t n, const T* a, T* out, F f) {
  constexpr int W = Pack<T>::kN;
  const int64_t packs = kVec ? n / W : 0;
  ZDL_GRID_STRIDE(p, packs) {
    const Pack<T> x = load_pack(a + p * W);
    Pack<T> o;
#pragma unroll
    for (int k = 0; k < W; ++k) o.v[k] = from_f<T>(f(to_f(x.v[k])));
    store_pack(out + p * W, o);
  }
  ZDL_GRID_STRIDE(j, n - packs * W) out[packs * W + j] = from_f<T>(f(to_f(a[packs * W + j])));
}
template <class T, bool kVec, class F>
__device__ __forceinline__ void map2(int64_t n, const T* a, const T* b, T* out, F f) {
  constexpr int W = Pack<T>::kN;
  const int64_t packs = kVec ? n / W : 0;
  ZDL_GRID_STRIDE(p, packs) {
    const Pack<T> x = load_pack(a + p * W), y = load_pack(b + p * W);
    Pack<T> o;
#pragma unroll
    for (int k = 0; k < W; ++k) o.v[k] = from_f<T>(f(to_f(x.v[k]), to_f(y.v[k])));
    store_pack(out + p * W, o);
  }
  ZDL_GRID_STRIDE(j, n - packs * W) {
    const int64_t i = packs * W + j;
    out[i] = from_f<T>(f(to_f(a[i]), to_f(b[i])));
  }
}
template <class T>
unsigned map_grid(int64_t n, bool vec) {
  return grid_for(vec ? n / Pack<T>::kN + n % Pack<T>::kN : n);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
// `scratch`: __shared__ float[32]. Fixed order: deterministic.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : -INFINITY;
  return warp_max(v);
}

}  // namespace zdl::kernels::cuda

// Calls `body` with a value of the element type (float or __nv_bfloat16) for `dtype`; other
// dtypes throw naming the kernel.
#define ZDL_CUDA_DISPATCH_FLOAT(dtype, what, body)                                                     \
  do {                                                                                                 \
    switch (dtype) {                                                                                   \
      case ::zdl::DType::F32: body(float{}); break;                                                    \
      case ::zdl::DType::BF16: body(__nv_bfloat16{}); break;                                           \
      default:                                                                                         \
        ZDL_CHECK(false, what, ": dtype ", ::zdl::dtype_name(dtype), " is not supported on CUDA (f32, bf16)"); \
    }                                                                                                  \
  } while (0)

#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/softmax.h"

namespace zdl::kernels::cuda {

namespace {

// Rows of at most this many columns get a warp each; longer rows a block of kBlock threads.
constexpr int64_t kWarpRowMax = 1024;

// Sum / max over the threads that share a row: a warp (kRowThreads == 32) or the whole block.
template <int kRowThreads>
__device__ __forceinline__ float row_sum(float v, float* scratch) {
  if constexpr (kRowThreads == 32) return warp_sum(v);
  else return block_sum(v, scratch);
}
template <int kRowThreads>
__device__ __forceinline__ float row_max(float v, float* scratch) {
  if constexpr (kRowThreads == 32) return warp_max(v);
  else return block_max(v, scratch);
}

// Thread t of the row group handles columns t, t + kRowThreads, ... The row loop's bound is
// the same for every thread of a group (a warp, or the whole block), so the reductions see
// all of their threads. No __restrict__: out may alias x - each element is read for the max
// and the sum before any thread of the row writes (the reductions order those phases) and
// written by the thread that reads it.
template <class T, int kRowThreads>
__global__ void softmax_forward_kernel(int64_t rows, int64_t C, const T* x, T* out) {
  __shared__ float scratch[32];
  const int groups = blockDim.x / kRowThreads;
  const int group = threadIdx.x / kRowThreads, t = threadIdx.x % kRowThreads;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * groups + group; r < rows;
       r += static_cast<int64_t>(gridDim.x) * groups) {
    const T* xr = x + r * C;
    T* yr = out + r * C;
    float mx = -INFINITY;
    for (int64_t c = t; c < C; c += kRowThreads) mx = fmaxf(mx, to_f(xr[c]));
    mx = row_max<kRowThreads>(mx, scratch);
    float s = 0.0f;
    for (int64_t c = t; c < C; c += kRowThreads) s += expf(to_f(xr[c]) - mx);
    const float inv = 1.0f / row_sum<kRowThreads>(s, scratch);
    for (int64_t c = t; c < C; c += kRowThreads) yr[c] = from_f<T>(expf(to_f(xr[c]) - mx) * inv);
  }
}

template <class T, int kRowThreads>
__global__ void softmax_backward_kernel(int64_t rows, int64_t C, const T* y, const T* dout, T* dx) {
  __shared__ float scratch[32];
  const int groups = blockDim.x / kRowThreads;
  const int group = threadIdx.x / kRowThreads, t = threadIdx.x % kRowThreads;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * groups + group; r < rows;
       r += static_cast<int64_t>(gridDim.x) * groups) {
    const T* yr = y + r * C;
    const T* gr = dout + r * C;
    T* dr = dx + r * C;
    float dot = 0.0f;
    for (int64_t c = t; c < C; c += kRowThreads) dot += to_f(gr[c]) * to_f(yr[c]);
    dot = row_sum<kRowThreads>(dot, scratch);
    for (int64_t c = t; c < C; c += kRowThreads) dr[c] = from_f<T>(to_f(yr[c]) * (to_f(gr[c]) - dot));
  }
}

unsigned row_grid(int64_t rows, int rows_per_block) {
  return static_cast<unsigned>(std::clamp<int64_t>((rows + rows_per_block - 1) / rows_per_block, 1, 65535 * 16));
}

}  // namespace

void softmax_forward(DType dtype, int64_t rows, int64_t C, const void* x, void* out) {
  if (rows <= 0 || C <= 0) return;
  cudaStream_t s = compute_stream();
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x);
    T* po = static_cast<T*>(out);
    if (C <= kWarpRowMax)
      softmax_forward_kernel<T, 32><<<row_grid(rows, kBlock / 32), kBlock, 0, s>>>(rows, C, px, po);
    else
      softmax_forward_kernel<T, kBlock><<<row_grid(rows, 1), kBlock, 0, s>>>(rows, C, px, po);
    ZDL_CUDA_CHECK_LAUNCH();
  };
  ZDL_CUDA_DISPATCH_FLOAT(dtype, "softmax (cuda)", run);
}

void softmax_backward(DType dtype, int64_t rows, int64_t C, const void* y, const void* dout, void* dx) {
  if (rows <= 0 || C <= 0) return;
  cudaStream_t s = compute_stream();
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const T* py = static_cast<const T*>(y);
    const T* pg = static_cast<const T*>(dout);
    T* pd = static_cast<T*>(dx);
    if (C <= kWarpRowMax)
      softmax_backward_kernel<T, 32><<<row_grid(rows, kBlock / 32), kBlock, 0, s>>>(rows, C, py, pg, pd);
    else
      softmax_backward_kernel<T, kBlock><<<row_grid(rows, 1), kBlock, 0, s>>>(rows, C, py, pg, pd);
    ZDL_CUDA_CHECK_LAUNCH();
  };
  ZDL_CUDA_DISPATCH_FLOAT(dtype, "softmax backward (cuda)", run);
}

}  // namespace zdl::kernels::cuda

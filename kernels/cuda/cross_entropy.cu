#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cross_entropy.h"

namespace zdl::kernels::cuda {

namespace {

constexpr int kRowBlock = 512;  // threads per row (V = 50304: ~98 elements per thread)

__device__ __forceinline__ double warp_sum_f64(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Fixed-order f64 sum over the block (blockDim.x a multiple of 32); every thread gets it.
__device__ __forceinline__ double block_sum_f64(double v, double* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum_f64(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0;
  return warp_sum_f64(v);
}

// Block per row n (grid-stride), one pass over the row: each thread keeps the running maximum m
// of the elements it saw and the f64 sum of exp(x - m), rescaled when m grows; the block then
// takes the row's maximum M and adds each thread's sum times exp(m - M) in a fixed order. The
// row is read once (bandwidth is the kernel's cost at GPT-2's V = 50304). Thread t takes the
// groups of W elements p = t, t + blockDim, ... (the last group may be shorter), so which
// thread adds which element depends on V alone; kVec (16-byte aligned rows) only changes how a
// whole group is loaded: one 16-byte pack. The target check and the row loop bounds are the
// same for the whole block, so every thread reaches the block reductions.
template <class T, bool kVec, class I>
__global__ void ce_forward_kernel(int64_t N, int64_t V, int64_t ld, const T* logits, const I* targets,
                                  int64_t ignore_index, float* row_max, float* row_lse, float* row_loss) {
  __shared__ float scratch[32];
  __shared__ double scratch_d[32];
  constexpr int W = Pack<T>::kN;
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const int64_t t = static_cast<int64_t>(targets[n]);
    if (t == ignore_index || t < 0 || t >= V) {  // out of range: its check fails at the next host wait
      if (threadIdx.x == 0) row_max[n] = row_lse[n] = row_loss[n] = 0.0f;
      continue;
    }
    const T* x = logits + n * ld;
    float m = -INFINITY;
    double s = 0.0;
    const int64_t groups = (V + W - 1) / W;
    for (int64_t p = threadIdx.x; p < groups; p += blockDim.x) {
      const int64_t v0 = p * W;
      const int k = static_cast<int>(V - v0 < W ? V - v0 : W);
      float g[W];
      if (kVec && k == W) {
        const Pack<T> pk = load_pack(x + v0);
#pragma unroll
        for (int i = 0; i < W; ++i) g[i] = to_f(pk.v[i]);
      } else {
#pragma unroll
        for (int i = 0; i < W; ++i) g[i] = i < k ? to_f(x[v0 + i]) : -INFINITY;  // constant indices: g stays in registers
      }
      // Raise m to the group's maximum first, then add its exponentials. -inf adds nothing
      // (also while m is still -inf, and past a short group's end); NaN and +inf make s NaN, as
      // on the CPU.
      float gm = g[0];
#pragma unroll
      for (int i = 1; i < W; ++i) gm = fmaxf(gm, g[i]);
      if (gm > m) {
        s *= static_cast<double>(expf(m - gm));
        m = gm;
      }
#pragma unroll
      for (int i = 0; i < W; ++i) s += g[i] == -INFINITY ? 0.0 : static_cast<double>(expf(g[i] - m));
    }
    const float mx = block_max(m, scratch);
    // A thread that saw only -inf has s = 0 (and exp(-inf - -inf) would be NaN).
    s = block_sum_f64(s == 0.0 ? 0.0 : s * static_cast<double>(expf(m - mx)), scratch_d);
    if (threadIdx.x == 0) {
      const double lse = log(s);
      row_max[n] = mx;
      row_lse[n] = static_cast<float>(lse);
      // -log p_t = max + lse - x_t
      row_loss[n] = static_cast<float>(static_cast<double>(mx) + lse - static_cast<double>(to_f(x[t])));
    }
  }
}

// loss[0] = (sum of row_loss in a fixed order) / count, 0 when count is 0. One block.
__global__ void ce_mean_kernel(int64_t N, const float* row_loss, const unsigned long long* count, float* loss) {
  __shared__ double scratch[32];
  double s = 0.0;
  for (int64_t n = threadIdx.x; n < N; n += blockDim.x) s += static_cast<double>(row_loss[n]);
  s = block_sum_f64(s, scratch);
  const unsigned long long c = *count;
  if (threadIdx.x == 0) loss[0] = c > 0 ? static_cast<float>(s / static_cast<double>(c)) : 0.0f;
}

// dlogits[n, v] = s * exp(x - max - lse) - s [v == t], s = dloss / count, 0 in the padding
// v >= V. Block per row; each element is read by the thread that then writes it, so dlogits
// may be logits. kVec: rows 16-byte aligned and ld a whole number of packs, read and written
// in 16-byte packs. An ignored row (or one whose target is out of range) is written as zeros
// without reading its logits.
template <class T, bool kVec, class I>
__global__ void ce_backward_kernel(int64_t N, int64_t V, int64_t ld, const T* logits, const I* targets,
                                   int64_t ignore_index, const float* row_max, const float* row_lse,
                                   const float* dloss, const unsigned long long* count, T* dlogits) {
  constexpr int W = Pack<T>::kN;
  const unsigned long long c = *count;
  const float s = c > 0 ? static_cast<float>(static_cast<double>(dloss[0]) / static_cast<double>(c)) : 0.0f;
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    T* d = dlogits + n * ld;
    const int64_t t = static_cast<int64_t>(targets[n]);
    const int64_t packs = kVec ? ld / W : 0;
    if (t == ignore_index || t < 0 || t >= V) {  // the same for the whole block
      Pack<T> zero;
#pragma unroll
      for (int i = 0; i < W; ++i) zero.v[i] = from_f<T>(0.0f);
      for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) store_pack(d + p * W, zero);
      for (int64_t v = packs * W + threadIdx.x; v < ld; v += blockDim.x) d[v] = from_f<T>(0.0f);
      continue;
    }
    const T* x = logits + n * ld;
    const float shift = row_max[n] + row_lse[n];
    auto grad = [&](float xv, int64_t v) {
      if (v >= V) return 0.0f;
      float g = __fmul_rn(s, expf(xv - shift));  // no fma: s p - s rounds as the CPU's two steps
      if (v == t) g -= s;
      return g;
    };
    for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
      const Pack<T> pk = load_pack(x + p * W);
      Pack<T> out;
#pragma unroll
      for (int i = 0; i < W; ++i) out.v[i] = from_f<T>(grad(to_f(pk.v[i]), p * W + i));
      store_pack(d + p * W, out);
    }
    for (int64_t v = packs * W + threadIdx.x; v < ld; v += blockDim.x) d[v] = from_f<T>(grad(to_f(x[v]), v));
  }
}

unsigned rows_grid(int64_t rows) { return static_cast<unsigned>(std::clamp<int64_t>(rows, 1, 65535 * 16)); }


template <class F>
void dispatch_ids(DType idtype, const char* what, F&& f) {
  if (idtype == DType::I32) f(int32_t{});
  else if (idtype == DType::I64) f(int64_t{});
  else ZDL_CHECK(false, what, ": targets must be i32 or i64, got ", dtype_name(idtype));
}

}  // namespace

void cross_entropy_forward(DType dtype, DType idtype, int64_t N, int64_t V, int64_t ld, const void* logits,
                           const void* targets, int64_t ignore_index, const unsigned long long* count,
                           float* row_max, float* row_lse, float* row_loss, float* loss) {
  cudaStream_t s = compute_stream();
  if (N > 0) {
    auto run = [&](auto tag) {
      using T = decltype(tag);
      dispatch_ids(idtype, "cross_entropy (cuda)", [&](auto itag) {
        using I = decltype(itag);
        auto kernel = rows_in_packs<T>(ld, {logits}) ? ce_forward_kernel<T, true, I> : ce_forward_kernel<T, false, I>;
        kernel<<<rows_grid(N), kRowBlock, 0, s>>>(N, V, ld, static_cast<const T*>(logits),
                                                  static_cast<const I*>(targets), ignore_index, row_max, row_lse,
                                                  row_loss);
        ZDL_CUDA_CHECK_LAUNCH();
      });
    };
    ZDL_CUDA_DISPATCH_FLOAT(dtype, "cross_entropy (cuda)", run);
    ce_mean_kernel<<<1, 1024, 0, s>>>(N, row_loss, count, loss);  // all rows ignored: 0, not NaN
    ZDL_CUDA_CHECK_LAUNCH();
  } else {
    ZDL_CUDA_CHECK(cudaMemsetAsync(loss, 0, sizeof(float), s));
  }
}

void cross_entropy_backward(DType dtype, DType idtype, int64_t N, int64_t V, int64_t ld, const void* logits,
                            const void* targets, int64_t ignore_index, const float* row_max, const float* row_lse,
                            const float* dloss, const unsigned long long* count, void* dlogits) {
  if (N <= 0 || ld <= 0) return;
  cudaStream_t s = compute_stream();
  auto run = [&](auto tag) {
    using T = decltype(tag);
    dispatch_ids(idtype, "cross_entropy backward (cuda)", [&](auto itag) {
      using I = decltype(itag);
      auto kernel =
          rows_in_packs<T>(ld, {logits, dlogits}) ? ce_backward_kernel<T, true, I> : ce_backward_kernel<T, false, I>;
      kernel<<<rows_grid(N), kRowBlock, 0, s>>>(N, V, ld, static_cast<const T*>(logits),
                                                static_cast<const I*>(targets), ignore_index, row_max, row_lse, dloss,
                                                count, static_cast<T*>(dlogits));
      ZDL_CUDA_CHECK_LAUNCH();
    });
  };
  ZDL_CUDA_DISPATCH_FLOAT(dtype, "cross_entropy backward (cuda)", run);
}

}  // namespace zdl::kernels::cuda

#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/layer_norm.h"

namespace zdl::kernels::cuda {

namespace {

constexpr int kWarpsPerBlock = kBlock / 32;

// Blocks for warp-per-row kernels (grid-stride over rows beyond the cap).
unsigned row_warp_grid(int64_t rows) {
  int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, 65535 * 16));
}

// Row chunks for the dweight/dbias partial sums: enough (column block, chunk) pairs to fill
// the GPU, at least 16 rows per chunk. Depends on `rows` only (determinism).
int64_t ln_chunks(int64_t rows) { return std::clamp<int64_t>((rows + 15) / 16, 1, 512); }

// Calls f(c, a[c], b[c]) for the elements of C-element rows a and b that lane `lane` of a warp
// owns: the groups of W elements p = lane, lane + 32, ... (the last group may be shorter), so
// which lane adds which element depends on C alone. kVec (the rows 16-byte aligned, C a whole
// number of groups) only changes how a group is loaded: one 16-byte pack (the warp reads 512
// contiguous bytes per step). With `out`, the row out gets f's value at each element, written in
// packs where kVec.
template <class T, bool kVec, class F>
__device__ __forceinline__ void lane_elements(const T* a, const T* b, int64_t C, int lane, F f, T* out = nullptr) {
  constexpr int W = Pack<T>::kN;
  for (int64_t p = lane; p < (C + W - 1) / W; p += 32) {
    const int64_t c0 = p * W;
    if constexpr (kVec) {
      const Pack<T> x = load_pack(a + c0), y = load_pack(b + c0);
      Pack<T> o;
#pragma unroll
      for (int k = 0; k < W; ++k) o.v[k] = from_f<T>(f(c0 + k, to_f(x.v[k]), to_f(y.v[k])));
      if (out) store_pack(out + c0, o);
    } else {
      for (int64_t c = c0; c < c0 + W && c < C; ++c) {
        const float v = f(c, to_f(a[c]), to_f(b[c]));
        if (out) out[c] = from_f<T>(v);
      }
    }
  }
}

// One warp per row r (the loop bound is the same for all lanes of a warp, so the shuffles
// see full warps). Three passes over the row (mean, variance, output): the second and third
// read it from L1.
template <class T, bool kVec>
__global__ void layer_norm_forward_kernel(int64_t rows, int64_t C, const T* x, const T* weight, const T* bias,
                                          float eps, T* out, float* mean, float* rstd) {
  const int lane = threadIdx.x % 32;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; r < rows; r += stride) {
    const T* xr = x + r * C;
    float s = 0.0f;
    lane_elements<T, kVec>(xr, xr, C, lane, [&](int64_t, float v, float) { return s += v; });
    const float m = warp_sum(s) / static_cast<float>(C);
    float var = 0.0f;
    lane_elements<T, kVec>(xr, xr, C, lane, [&](int64_t, float v, float) {
      const float d = v - m;
      return var += d * d;
    });
    const float rs = 1.0f / sqrtf(warp_sum(var) / static_cast<float>(C) + eps);
    lane_elements<T, kVec>(
        xr, xr, C, lane,
        [&](int64_t c, float v, float) {
          float n = (v - m) * rs;
          if (weight) n *= to_f(weight[c]);
          if (bias) n += to_f(bias[c]);
          return n;
        },
        out + r * C);
    if (lane == 0) {
      mean[r] = m;
      rstd[r] = rs;
    }
  }
}

// dx, one warp per row.
template <class T, bool kVec>
__global__ void layer_norm_dx_kernel(int64_t rows, int64_t C, const T* x, const T* weight, const float* mean,
                                     const float* rstd, const T* dout, T* dx) {
  const int lane = threadIdx.x % 32;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; r < rows; r += stride) {
    const T* xr = x + r * C;
    const T* gr = dout + r * C;
    const float m = mean[r], rs = rstd[r];
    float sum_g = 0.0f, sum_gx = 0.0f;  // sum_c g, sum_c g * xhat
    lane_elements<T, kVec>(xr, gr, C, lane, [&](int64_t c, float v, float d) {
      const float g = weight ? d * to_f(weight[c]) : d;
      sum_g += g;
      return sum_gx += g * ((v - m) * rs);
    });
    const float mg = warp_sum(sum_g) / static_cast<float>(C);
    const float mgx = warp_sum(sum_gx) / static_cast<float>(C);
    lane_elements<T, kVec>(
        xr, gr, C, lane,
        [&](int64_t c, float v, float d) {
          const float g = weight ? d * to_f(weight[c]) : d;
          const float xhat = (v - m) * rs;
          return rs * (g - mg - xhat * mgx);
        },
        dx + r * C);
  }
}

// Partial column sums: thread (column c, chunk blockIdx.y) sums rows [r0, r1) in order.
// partial_w, partial_b: [chunks, C] f32.
template <class T>
__global__ void layer_norm_dparam_partial_kernel(int64_t rows, int64_t C, int64_t chunk_rows, const T* x,
                                                 const float* mean, const float* rstd, const T* dout,
                                                 float* partial_w, float* partial_b) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * chunk_rows, r1 = r0 + chunk_rows < rows ? r0 + chunk_rows : rows;
  float aw = 0.0f, ab = 0.0f;
  for (int64_t r = r0; r < r1; ++r) {
    const float g = to_f(dout[r * C + c]);
    aw += g * ((to_f(x[r * C + c]) - mean[r]) * rstd[r]);
    ab += g;
  }
  partial_w[chunk * C + c] = aw;
  partial_b[chunk * C + c] = ab;
}

// dweight[c], dbias[c] = sums of the chunks' partials. A block takes 32 columns (a warp's
// coalesced row of partials) and kFinalLanes lanes per column: lane j sums chunks j,
// j + kFinalLanes, ... in order, then lane 0 adds the lanes' sums in lane order (a fixed order:
// the same bits every run). One thread per column summing up to 512 chunks left the GPU idle
// (62 us a call at C = 768 on an H100, 7% of a GPT-2 step).
constexpr int kFinalLanes = 8;

template <class T>
__global__ void layer_norm_dparam_final_kernel(int64_t C, int64_t chunks, const float* partial_w,
                                               const float* partial_b, T* dweight, T* dbias) {
  __shared__ float sw[kFinalLanes][32], sb[kFinalLanes][32];
  const int col = threadIdx.x % 32, lane = threadIdx.x / 32;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + col;
  float aw = 0.0f, ab = 0.0f;
  if (c < C) {
    for (int64_t k = lane; k < chunks; k += kFinalLanes) {
      aw += partial_w[k * C + c];
      ab += partial_b[k * C + c];
    }
  }
  sw[lane][col] = aw;
  sb[lane][col] = ab;
  __syncthreads();
  if (lane != 0 || c >= C) return;
  for (int j = 1; j < kFinalLanes; ++j) {
    aw += sw[j][col];
    ab += sb[j][col];
  }
  if (dweight) dweight[c] = from_f<T>(aw);
  if (dbias) dbias[c] = from_f<T>(ab);
}

}  // namespace

void layer_norm_forward(DType dtype, int64_t rows, int64_t C, const void* x, const void* weight, const void* bias,
                        double eps, void* out, float* mean, float* rstd) {
  if (rows <= 0) return;
  ZDL_CHECK(C > 0, "layer_norm (cuda): C must be > 0, got ", C);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const bool vec = rows_in_packs<T>(C, {x, out});
    (vec ? layer_norm_forward_kernel<T, true> : layer_norm_forward_kernel<T, false>)<<<row_warp_grid(rows), kBlock, 0,
                                                                                       compute_stream()>>>(
        rows, C, static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<const T*>(bias),
        static_cast<float>(eps), static_cast<T*>(out), mean, rstd);
    ZDL_CUDA_CHECK_LAUNCH();
  };
  ZDL_CUDA_DISPATCH_FLOAT(dtype, "layer_norm (cuda)", run);
}

size_t layer_norm_backward_workspace_bytes(int64_t rows, int64_t C) {
  if (rows <= 0 || C <= 0) return 0;
  return static_cast<size_t>(2 * ln_chunks(rows) * C) * sizeof(float);
}

void layer_norm_backward(DType dtype, int64_t rows, int64_t C, const void* x, const void* weight, const float* mean,
                         const float* rstd, const void* dout, void* dx, void* dweight, void* dbias, void* workspace) {
  if (rows <= 0 || C <= 0) return;
  cudaStream_t s = compute_stream();
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x);
    const T* pg = static_cast<const T*>(dout);
    if (dx) {
      const bool vec = rows_in_packs<T>(C, {x, dout, dx});
      (vec ? layer_norm_dx_kernel<T, true> : layer_norm_dx_kernel<T, false>)<<<row_warp_grid(rows), kBlock, 0, s>>>(
          rows, C, px, static_cast<const T*>(weight), mean, rstd, pg, static_cast<T*>(dx));
      ZDL_CUDA_CHECK_LAUNCH();
    }
    if (dweight || dbias) {
      ZDL_CHECK(workspace != nullptr, "layer_norm backward (cuda): dweight/dbias need a workspace of ",
                layer_norm_backward_workspace_bytes(rows, C), " bytes");
      const int64_t chunks = ln_chunks(rows), chunk_rows = (rows + chunks - 1) / chunks;
      float* pw = static_cast<float*>(workspace);
      float* pb = pw + chunks * C;
      dim3 grid(static_cast<unsigned>((C + kBlock - 1) / kBlock), static_cast<unsigned>(chunks));  // chunks <= 512
      layer_norm_dparam_partial_kernel<T><<<grid, kBlock, 0, s>>>(rows, C, chunk_rows, px, mean, rstd, pg, pw, pb);
      ZDL_CUDA_CHECK_LAUNCH();
      layer_norm_dparam_final_kernel<T><<<static_cast<unsigned>((C + 31) / 32), 32 * kFinalLanes, 0, s>>>(
          C, chunks, pw, pb, static_cast<T*>(dweight), static_cast<T*>(dbias));
      ZDL_CUDA_CHECK_LAUNCH();
    }
  };
  ZDL_CUDA_DISPATCH_FLOAT(dtype, "layer_norm backward (cuda)", run);
}

}  // namespace zdl::kernels::cuda

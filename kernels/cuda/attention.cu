#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/common.cuh"

namespace zdl::kernels::cuda {

namespace {

constexpr int kWarps = kBlock / 32;

// A head-dim vector held by a warp: lane l keeps elements l + 32 r, r < R (0 past HS).
template <int R>
struct Lanes {
  float v[R];
};

template <class T, int R>
__device__ __forceinline__ Lanes<R> load_row(const T* p, int hs, int lane, float scale = 1.0f) {
  Lanes<R> out;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int d = lane + 32 * r;
    out.v[r] = d < hs ? to_f(p[d]) * scale : 0.0f;
  }
  return out;
}

// Dot product of a register row with a row in memory, summed over the warp (all lanes get it).
template <class T, int R>
__device__ __forceinline__ float warp_dot(const Lanes<R>& a, const T* p, int hs, int lane) {
  float part = 0.0f;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int d = lane + 32 * r;
    if (d < hs) part += a.v[r] * to_f(p[d]);
  }
  return warp_sum(part);
}

// acc += w * row (row in memory).
template <class T, int R>
__device__ __forceinline__ void axpy(Lanes<R>& acc, float w, const T* p, int hs, int lane) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int d = lane + 32 * r;
    if (d < hs) acc.v[r] += w * to_f(p[d]);
  }
}

template <class T, int R>
__device__ __forceinline__ void store_row(T* p, const Lanes<R>& a, float scale, int hs, int lane) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int d = lane + 32 * r;
    if (d < hs) p[d] = from_f<T>(a.v[r] * scale);
  }
}

// Warp-per-row loops: rows [0, bnh * t), row = bh * t + i. The loop bound is per warp, so
// the shuffles always see full warps.
#define ZDL_ATTN_WARP_ROWS(row, rows)                                                                      \
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; row < (rows); \
       row += static_cast<int64_t>(gridDim.x) * (blockDim.x / 32))

// Online softmax over keys j <= i: running max m, running sum l of exp(s - m), and the
// running P V (acc) rescaled by exp(m_old - m_new) whenever the max grows.
template <class T, int R>
__global__ void attention_forward_kernel(int64_t bnh, int64_t t, int hs, float scale, const T* q, const T* k,
                                         const T* v, T* out, float* lse) {
  const int lane = threadIdx.x % 32;
  ZDL_ATTN_WARP_ROWS(row, bnh * t) {
    const int64_t bh = row / t, i = row % t;
    const T* kb = k + bh * t * hs;
    const T* vb = v + bh * t * hs;
    const Lanes<R> qi = load_row<T, R>(q + row * hs, hs, lane, scale);  // q_i / sqrt(HS)
    Lanes<R> acc;
#pragma unroll
    for (int r = 0; r < R; ++r) acc.v[r] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int64_t j = 0; j <= i; ++j) {
      const float s = warp_dot<T, R>(qi, kb + j * hs, hs, lane);
      const float m_new = fmaxf(m, s);
      const float corr = expf(m - m_new);  // 0 on the first key (m = -inf)
      const float p = expf(s - m_new);
      l = l * corr + p;
#pragma unroll
      for (int r = 0; r < R; ++r) acc.v[r] *= corr;
      axpy<T, R>(acc, p, vb + j * hs, hs, lane);
      m = m_new;
    }
    store_row<T, R>(out + row * hs, acc, 1.0f / l, hs, lane);
    if (lse && lane == 0) lse[row] = m + logf(l);
  }
}

// D[row] = dO_row . O_row.
template <class T, int R>
__global__ void attention_row_dot_kernel(int64_t rows, int hs, const T* dout, const T* out, float* D) {
  const int lane = threadIdx.x % 32;
  ZDL_ATTN_WARP_ROWS(row, rows) {
    const Lanes<R> o = load_row<T, R>(out + row * hs, hs, lane);
    const float d = warp_dot<T, R>(o, dout + row * hs, hs, lane);
    if (lane == 0) D[row] = d;
  }
}

// dQ_i = scale sum_{j<=i} P_ij (dO_i . v_j - D_i) k_j, a warp per query row i.
template <class T, int R>
__global__ void attention_dq_kernel(int64_t bnh, int64_t t, int hs, float scale, const T* q, const T* k, const T* v,
                                    const float* lse, const T* dout, const float* D, T* dq) {
  const int lane = threadIdx.x % 32;
  ZDL_ATTN_WARP_ROWS(row, bnh * t) {
    const int64_t bh = row / t, i = row % t;
    const T* kb = k + bh * t * hs;
    const T* vb = v + bh * t * hs;
    const Lanes<R> qi = load_row<T, R>(q + row * hs, hs, lane, scale);  // the forward's scaled q_i
    const Lanes<R> doi = load_row<T, R>(dout + row * hs, hs, lane);
    const float lse_i = lse[row], d_i = D[row];
    Lanes<R> acc;
#pragma unroll
    for (int r = 0; r < R; ++r) acc.v[r] = 0.0f;
    for (int64_t j = 0; j <= i; ++j) {
      const float p = expf(warp_dot<T, R>(qi, kb + j * hs, hs, lane) - lse_i);
      const float ds = p * (warp_dot<T, R>(doi, vb + j * hs, hs, lane) - d_i);
      axpy<T, R>(acc, ds, kb + j * hs, hs, lane);
    }
    store_row<T, R>(dq + row * hs, acc, scale, hs, lane);
  }
}

// dK_j = scale sum_{i>=j} dS_ij q_i,  dV_j = sum_{i>=j} P_ij dO_i, a warp per key row j.
template <class T, int R>
__global__ void attention_dkv_kernel(int64_t bnh, int64_t t, int hs, float scale, const T* q, const T* k, const T* v,
                                     const float* lse, const T* dout, const float* D, T* dk, T* dv) {
  const int lane = threadIdx.x % 32;
  ZDL_ATTN_WARP_ROWS(row, bnh * t) {
    const int64_t bh = row / t, j = row % t;
    const T* qb = q + bh * t * hs;
    const T* ob = dout + bh * t * hs;
    const float* lse_b = lse + bh * t;
    const float* D_b = D + bh * t;
    const Lanes<R> kj = load_row<T, R>(k + row * hs, hs, lane);
    const Lanes<R> vj = load_row<T, R>(v + row * hs, hs, lane);
    Lanes<R> acc_k, acc_v;
#pragma unroll
    for (int r = 0; r < R; ++r) acc_k.v[r] = acc_v.v[r] = 0.0f;
    for (int64_t i = j; i < t; ++i) {
      // s_ij as in the forward: (q_i / sqrt(HS)) . k_j, the scale applied to q's elements.
      const T* qi = qb + i * hs;
      float part = 0.0f;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int d = lane + 32 * r;
        if (d < hs) part += (to_f(qi[d]) * scale) * kj.v[r];
      }
      const float p = expf(warp_sum(part) - lse_b[i]);
      const float ds = p * (warp_dot<T, R>(vj, ob + i * hs, hs, lane) - D_b[i]);
      axpy<T, R>(acc_k, ds, qi, hs, lane);
      axpy<T, R>(acc_v, p, ob + i * hs, hs, lane);
    }
    store_row<T, R>(dk + row * hs, acc_k, scale, hs, lane);
    store_row<T, R>(dv + row * hs, acc_v, 1.0f, hs, lane);
  }
}

unsigned warp_rows_grid(int64_t rows) {
  return static_cast<unsigned>(std::clamp<int64_t>((rows + kWarps - 1) / kWarps, 1, 65535 * 16));
}

void check_head_size(const char* what, int64_t hs) {
  ZDL_CHECK(hs >= 1 && hs <= kAttentionMaxHeadSize, what, ": head size HS=", hs,
            " is not supported on CUDA (1 <= HS <= ", kAttentionMaxHeadSize, ")");
}

// Calls f(Lanes-count constant) for R = ceil(HS / 32) in 1..4.
template <class F>
void dispatch_lanes(int64_t hs, F&& f) {
  switch ((hs + 31) / 32) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    default: f(std::integral_constant<int, 4>{}); break;
  }
}

}  // namespace

void causal_attention_forward(DType dtype, int64_t bnh, int64_t t, int64_t hs, const void* q, const void* k,
                              const void* v, void* out, float* lse) {
  check_head_size("causal_attention (cuda)", hs);
  if (bnh <= 0 || t <= 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  cudaStream_t s = compute_stream();
  auto run = [&](auto tag) {
    using T = decltype(tag);
    dispatch_lanes(hs, [&](auto lanes) {
      constexpr int R = decltype(lanes)::value;
      attention_forward_kernel<T, R><<<warp_rows_grid(bnh * t), kBlock, 0, s>>>(
          bnh, t, static_cast<int>(hs), scale, static_cast<const T*>(q), static_cast<const T*>(k),
          static_cast<const T*>(v), static_cast<T*>(out), lse);
      ZDL_CUDA_CHECK_LAUNCH();
    });
  };
  ZDL_CUDA_DISPATCH_FLOAT(dtype, "causal_attention (cuda)", run);
}

size_t attention_backward_workspace_bytes(int64_t bnh, int64_t t) {
  return bnh > 0 && t > 0 ? static_cast<size_t>(bnh * t) * sizeof(float) : 0;
}

void causal_attention_backward(DType dtype, int64_t bnh, int64_t t, int64_t hs, const void* q, const void* k,
                               const void* v, const void* out, const float* lse, const void* dout, void* dq, void* dk,
                               void* dv, void* workspace) {
  check_head_size("causal_attention backward (cuda)", hs);
  if (bnh <= 0 || t <= 0) return;
  ZDL_CHECK(workspace != nullptr && lse != nullptr,
            "causal_attention backward (cuda): needs the forward's lse and a workspace of ",
            attention_backward_workspace_bytes(bnh, t), " bytes");
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int64_t rows = bnh * t;
  const unsigned grid = warp_rows_grid(rows);
  float* D = static_cast<float*>(workspace);
  cudaStream_t s = compute_stream();
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const T* pq = static_cast<const T*>(q);
    const T* pk = static_cast<const T*>(k);
    const T* pv = static_cast<const T*>(v);
    const T* pg = static_cast<const T*>(dout);
    const int h = static_cast<int>(hs);
    dispatch_lanes(hs, [&](auto lanes) {
      constexpr int R = decltype(lanes)::value;
      attention_row_dot_kernel<T, R><<<grid, kBlock, 0, s>>>(rows, h, pg, static_cast<const T*>(out), D);
      ZDL_CUDA_CHECK_LAUNCH();
      attention_dq_kernel<T, R><<<grid, kBlock, 0, s>>>(bnh, t, h, scale, pq, pk, pv, lse, pg, D, static_cast<T*>(dq));
      ZDL_CUDA_CHECK_LAUNCH();
      attention_dkv_kernel<T, R><<<grid, kBlock, 0, s>>>(bnh, t, h, scale, pq, pk, pv, lse, pg, D, static_cast<T*>(dk),
                                                         static_cast<T*>(dv));
      ZDL_CUDA_CHECK_LAUNCH();
    });
  };
  ZDL_CUDA_DISPATCH_FLOAT(dtype, "causal_attention backward (cuda)", run);
}

}  // namespace zdl::kernels::cuda

// Optimizer kernels on CUDA (see optim.h): chunked fused AdamW and the deterministic sum of
// squares. Layered as the other kernels: __global__ kernel -> typed launcher on a stream ->
// checked, type-erased entry point.
#include <algorithm>
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/optim.h"

namespace zdl::kernels::cuda {

std::vector<AdamWChunk> adamw_chunks(const std::vector<AdamWSegment>& segments) {
  std::vector<AdamWChunk> out;
  for (const AdamWSegment& s : segments) {
    ZDL_CHECK(s.offset >= 0 && s.n >= 0, "adamw_chunks: bad segment offset=", s.offset, " n=", s.n);
    for (int64_t at = 0; at < s.n; at += kAdamWChunk)
      out.push_back(AdamWChunk{s.offset + at, std::min(kAdamWChunk, s.n - at), static_cast<float>(s.weight_decay), 0.0f});
  }
  return out;
}

namespace {

// ---- AdamW ----

// The f32 constants of one step, formed on the host exactly as the CPU twin forms them.
struct AdamWConsts {
  float b1, b2, one_minus_b1, one_minus_b2, eps, lr, gs, inv_bc1, inv_sqrt_bc2;
};

AdamWConsts adamw_consts(const cpu::AdamWParams& h, double grad_scale) {
  // As kernels/cpu/optim.cpp: bias corrections in double, their inverses rounded to f32; the
  // hyperparameters rounded to f32; (1 - b) formed in f32 from the rounded b.
  const double bc1 = 1.0 - std::pow(h.beta1, static_cast<double>(h.step));
  const double bc2 = 1.0 - std::pow(h.beta2, static_cast<double>(h.step));
  AdamWConsts c;
  c.b1 = static_cast<float>(h.beta1);
  c.b2 = static_cast<float>(h.beta2);
  c.one_minus_b1 = 1.0f - c.b1;
  c.one_minus_b2 = 1.0f - c.b2;
  c.eps = static_cast<float>(h.eps);
  c.lr = static_cast<float>(h.lr);
  c.gs = static_cast<float>(grad_scale);
  c.inv_bc1 = static_cast<float>(1.0 / bc1);
  c.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  return c;
}

// Block k (grid-stride) updates chunk k; its threads stride over the chunk's elements.
template <class G>
__global__ void adamw_kernel(const AdamWChunk* __restrict__ chunks, int64_t num_chunks, float* __restrict__ p,
                             const G* __restrict__ g, float* __restrict__ m, float* __restrict__ v, AdamWConsts c) {
  for (int64_t k = blockIdx.x; k < num_chunks; k += gridDim.x) {
    const int64_t base = chunks[k].offset, n = chunks[k].n;
    const float wd = chunks[k].weight_decay;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const int64_t i = base + j;
      // The CPU twin's expressions, term for term, each operation rounded on its own (the _rn
      // intrinsics are never fused into an FMA; the twin is compiled without contractions): the
      // same bits on both, so optimizer offload to the host changes no result.
      const float gi = __fmul_rn(to_f(g[i]), c.gs);
      const float mi = __fadd_rn(__fmul_rn(c.b1, m[i]), __fmul_rn(c.one_minus_b1, gi));
      const float vi = __fadd_rn(__fmul_rn(c.b2, v[i]), __fmul_rn(__fmul_rn(c.one_minus_b2, gi), gi));
      m[i] = mi;
      v[i] = vi;
      const float pi = p[i];
      const float denom = __fadd_rn(__fmul_rn(__fsqrt_rn(vi), c.inv_sqrt_bc2), c.eps);
      const float update = __fadd_rn(__fdiv_rn(__fmul_rn(mi, c.inv_bc1), denom), __fmul_rn(wd, pi));
      p[i] = __fsub_rn(pi, __fmul_rn(c.lr, update));
    }
  }
}

template <class G>
void launch_adamw(const AdamWChunk* chunks, int64_t num_chunks, float* p, const G* g, float* m, float* v,
                  const AdamWConsts& c, cudaStream_t s) {
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(num_chunks, int64_t{1} << 20));
  adamw_kernel<G><<<blocks, kBlock, 0, s>>>(chunks, num_chunks, p, g, m, v, c);
  ZDL_CUDA_CHECK_LAUNCH();
}

// ---- sum of squares ----

constexpr int64_t kSumSqMaxBlocks = 1024;
constexpr int64_t kSumSqPerThread = 16;  // elements per thread before another block is worth it

int64_t sum_squares_blocks(int64_t n) {
  const int64_t per_block = kBlock * kSumSqPerThread;
  return std::clamp<int64_t>((n + per_block - 1) / per_block, 1, kSumSqMaxBlocks);
}

__device__ __forceinline__ double warp_sum_d(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block in a fixed tree (blockDim.x == kBlock); thread 0 gets the result.
__device__ __forceinline__ double block_sum_d(double v) {
  __shared__ double scratch[kBlock / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_sum_d(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = 0.0;
  if (warp == 0) {
    v = lane < kBlock / 32 ? scratch[lane] : 0.0;
    v = warp_sum_d(v);
  }
  return v;
}

// Pass 1: block b sums elements b*blockDim + t + k*gridDim*blockDim into partials[b].
template <class T>
__global__ void sum_squares_partial_kernel(int64_t n, const T* __restrict__ x, double* __restrict__ partials) {
  double acc = 0.0;
  ZDL_GRID_STRIDE(i, n) {
    const double xi = static_cast<double>(to_f(x[i]));
    acc += xi * xi;
  }
  acc = block_sum_d(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// Pass 2: one block adds the partials (thread t: t, t + blockDim, ...; then the block tree).
__global__ void sum_squares_finish_kernel(int64_t num_partials, const double* __restrict__ partials,
                                          double* __restrict__ out) {
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < num_partials; i += blockDim.x) acc += partials[i];
  acc = block_sum_d(acc);
  if (threadIdx.x == 0) *out = acc;
}

template <class T>
void launch_sum_squares(int64_t n, const T* x, double* partials, double* out, cudaStream_t s) {
  const int64_t blocks = sum_squares_blocks(n);
  sum_squares_partial_kernel<T><<<static_cast<unsigned>(blocks), kBlock, 0, s>>>(n, x, partials);
  ZDL_CUDA_CHECK_LAUNCH();
  sum_squares_finish_kernel<<<1, kBlock, 0, s>>>(blocks, partials, out);
  ZDL_CUDA_CHECK_LAUNCH();
}

}  // namespace

void adamw_update(DType grad_dtype, const AdamWChunk* chunks, int64_t num_chunks, float* master, const void* grad,
                  float* m, float* v, const cpu::AdamWParams& h, double grad_scale) {
  ZDL_CHECK(num_chunks >= 0, "cuda adamw_update: negative chunk count ", num_chunks);
  if (num_chunks == 0) return;
  ZDL_CHECK(chunks != nullptr && master != nullptr && grad != nullptr && m != nullptr && v != nullptr,
            "cuda adamw_update: null buffer for ", num_chunks, " chunks");
  ZDL_CHECK(h.step >= 1, "cuda adamw_update: step must be >= 1 (bias correction), got ", h.step);
  const AdamWConsts c = adamw_consts(h, grad_scale);
  auto run = [&](auto tag) {
    using G = decltype(tag);
    launch_adamw<G>(chunks, num_chunks, master, static_cast<const G*>(grad), m, v, c, compute_stream());
  };
  ZDL_CUDA_DISPATCH_FLOAT(grad_dtype, "cuda adamw_update (gradient)", run);
}

int64_t sum_squares_partials(int64_t n) { return n > 0 ? sum_squares_blocks(n) : 0; }

void sum_squares(DType dtype, int64_t n, const void* x, double* partials, double* out) {
  ZDL_CHECK(n >= 0, "cuda sum_squares: negative size ", n);
  ZDL_CHECK(out != nullptr, "cuda sum_squares: no output");
  if (n == 0) {
    ZDL_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(double), compute_stream()));  // all-zero bits are +0.0
    return;
  }
  ZDL_CHECK(x != nullptr && partials != nullptr, "cuda sum_squares: null input or workspace for n=", n);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    launch_sum_squares<T>(n, static_cast<const T*>(x), partials, out, compute_stream());
  };
  ZDL_CUDA_DISPATCH_FLOAT(dtype, "cuda sum_squares", run);
}

}  // namespace zdl::kernels::cuda

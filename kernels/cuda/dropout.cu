#include <cmath>

#include "core/rng.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dropout.h"

namespace zdl::kernels::cuda {

namespace {

// One Philox block per element (word 0), exactly as the CPU twin: element i's mask depends on
// (seed, stream, offset + i) only, whatever the launch configuration.
template <class T>
__global__ void dropout_kernel(int64_t n, const T* x, uint32_t threshold, float scale, uint64_t seed,
                               uint64_t stream, int64_t offset, T* out) {
  ZDL_GRID_STRIDE(i, n) {
    const uint32_t k = Philox::words(seed, stream, static_cast<uint64_t>(offset + i)).w[0] >> 8;
    out[i] = k >= threshold ? from_f<T>(to_f(x[i]) * scale) : from_f<T>(0.0f);
  }
}

void apply_mask(const char* what, DType dtype, int64_t n, const void* x, double p, uint64_t seed, uint64_t stream,
                void* out, int64_t offset) {
  if (n <= 0) return;
  ZDL_CHECK(p >= 0.0 && p < 1.0, what, ": p must be in [0, 1), got p=", p);
  ZDL_CHECK(offset >= 0, what, ": offset must be >= 0, got ", offset);
  // keep <=> (double)(k * 2^-24) >= p <=> k >= p * 2^24 (exact in double) <=> k >= ceil(p * 2^24).
  const uint32_t threshold = static_cast<uint32_t>(std::ceil(p * 16777216.0));  // <= 2^24
  const float scale = static_cast<float>(1.0 / (1.0 - p));                      // the CPU's f32 scale
  auto run = [&](auto tag) {
    using T = decltype(tag);
    dropout_kernel<T><<<grid_for(n), kBlock, 0, compute_stream()>>>(n, static_cast<const T*>(x), threshold, scale,
                                                                    seed, stream, offset, static_cast<T*>(out));
    ZDL_CUDA_CHECK_LAUNCH();
  };
  ZDL_CUDA_DISPATCH_FLOAT(dtype, what, run);
}

}  // namespace

void dropout_forward(DType dtype, int64_t n, const void* x, double p, uint64_t seed, uint64_t stream, void* out,
                     int64_t offset) {
  apply_mask("dropout (cuda)", dtype, n, x, p, seed, stream, out, offset);
}

void dropout_backward(DType dtype, int64_t n, const void* dout, double p, uint64_t seed, uint64_t stream, void* dx,
                      int64_t offset) {
  apply_mask("dropout backward (cuda)", dtype, n, dout, p, seed, stream, dx, offset);
}

}  // namespace zdl::kernels::cuda

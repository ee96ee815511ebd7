#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gelu.h"

namespace zdl::kernels::cuda {

namespace {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCube = 0.044715f;

__device__ __forceinline__ float gelu(float v) {
  const float t = tanhf(kGeluScale * (v + kGeluCube * v * v * v));
  return 0.5f * v * (1.0f + t);
}

// u = k (x + c x^3), t = tanh(u):  gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2)
__device__ __forceinline__ float gelu_grad(float v, float dout) {
  const float t = tanhf(kGeluScale * (v + kGeluCube * v * v * v));
  const float local = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * kGeluScale * (1.0f + 3.0f * kGeluCube * v * v);
  return dout * local;
}

// No __restrict__: out may alias x (map1 and map2 read and write an element in one thread).
template <class T, bool kVec>
__global__ void gelu_forward_kernel(int64_t n, const T* x, T* out) {
  map1<T, kVec>(n, x, out, [](float v) { return gelu(v); });
}

template <class T, bool kVec>
__global__ void gelu_backward_kernel(int64_t n, const T* x, const T* dout, T* dx) {
  map2<T, kVec>(n, x, dout, dx, [](float v, float d) { return gelu_grad(v, d); });
}

}  // namespace

void gelu_forward(DType dtype, int64_t n, const void* x, void* out) {
  if (n <= 0) return;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const bool vec = aligned16(x) && aligned16(out);
    (vec ? gelu_forward_kernel<T, true> : gelu_forward_kernel<T, false>)<<<map_grid<T>(n, vec), kBlock, 0,
                                                                          compute_stream()>>>(
        n, static_cast<const T*>(x), static_cast<T*>(out));
    ZDL_CUDA_CHECK_LAUNCH();
  };
  ZDL_CUDA_DISPATCH_FLOAT(dtype, "gelu (cuda)", run);
}

void gelu_backward(DType dtype, int64_t n, const void* x, const void* dout, void* dx) {
  if (n <= 0) return;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const bool vec = aligned16(x) && aligned16(dout) && aligned16(dx);
    (vec ? gelu_backward_kernel<T, true> : gelu_backward_kernel<T, false>)<<<map_grid<T>(n, vec), kBlock, 0,
                                                                            compute_stream()>>>(
        n, static_cast<const T*>(x), static_cast<const T*>(dout), static_cast<T*>(dx));
    ZDL_CUDA_CHECK_LAUNCH();
  };
  ZDL_CUDA_DISPATCH_FLOAT(dtype, "gelu backward (cuda)", run);
}

}  // namespace zdl::kernels::cuda

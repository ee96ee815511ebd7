#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gelu.h"

namespace zdl::kernels::cuda {

namespace {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCube = 0.044715f;

// No __restrict__: out may alias x (each element is read and written by the same thread).
template <class T>
__global__ void gelu_forward_kernel(int64_t n, const T* x, T* out) {
  ZDL_GRID_STRIDE(i, n) {
    const float v = to_f(x[i]);
    const float t = tanhf(kGeluScale * (v + kGeluCube * v * v * v));
    out[i] = from_f<T>(0.5f * v * (1.0f + t));
  }
}

// u = k (x + c x^3), t = tanh(u):  gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2)
template <class T>
__global__ void gelu_backward_kernel(int64_t n, const T* x, const T* dout, T* dx) {
  ZDL_GRID_STRIDE(i, n) {
    const float v = to_f(x[i]);
    const float t = tanhf(kGeluScale * (v + kGeluCube * v * v * v));
    const float local =
        0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * kGeluScale * (1.0f + 3.0f * kGeluCube * v * v);
    dx[i] = from_f<T>(to_f(dout[i]) * local);
  }
}

}  // namespace

void gelu_forward(DType dtype, int64_t n, const void* x, void* out) {
  if (n <= 0) return;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    gelu_forward_kernel<T><<<grid_for(n), kBlock, 0, compute_stream()>>>(n, static_cast<const T*>(x),
                                                                         static_cast<T*>(out));
    ZDL_CUDA_CHECK_LAUNCH();
  };
  ZDL_CUDA_DISPATCH_FLOAT(dtype, "gelu (cuda)", run);
}

void gelu_backward(DType dtype, int64_t n, const void* x, const void* dout, void* dx) {
  if (n <= 0) return;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    gelu_backward_kernel<T><<<grid_for(n), kBlock, 0, compute_stream()>>>(
        n, static_cast<const T*>(x), static_cast<const T*>(dout), static_cast<T*>(dx));
    ZDL_CUDA_CHECK_LAUNCH();
  };
  ZDL_CUDA_DISPATCH_FLOAT(dtype, "gelu backward (cuda)", run);
}

}  // namespace zdl::kernels::cuda

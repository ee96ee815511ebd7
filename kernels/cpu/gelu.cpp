#include "kernels/cpu/gelu.h"

#include <cmath>

#include "kernels/cpu/parallel.h"

namespace zdl::kernels::cpu {

namespace {
constexpr double kGeluScale = 0.7978845608028654;  // sqrt(2/pi)
constexpr double kGeluCube = 0.044715;
}  // namespace

template <class T>
void gelu_forward(int64_t n, const T* x, T* out) {
  const T k = static_cast<T>(kGeluScale), c = static_cast<T>(kGeluCube);
  parallel_for(n, 8, [&](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) {
      T v = x[i];
      out[i] = T(0.5) * v * (T(1) + std::tanh(k * (v + c * v * v * v)));
    }
  });
}

template <class T>
void gelu_backward(int64_t n, const T* x, const T* dout, T* dx) {
  const T k = static_cast<T>(kGeluScale), c = static_cast<T>(kGeluCube);
  parallel_for(n, 8, [&](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) {
      // u = k (x + c x^3), t = tanh(u):  gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2)
      T v = x[i];
      T t = std::tanh(k * (v + c * v * v * v));
      T local = T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * k * (T(1) + T(3) * c * v * v);
      dx[i] = dout[i] * local;
    }
  });
}

template void gelu_forward<float>(int64_t, const float*, float*);
template void gelu_forward<double>(int64_t, const double*, double*);
template void gelu_backward<float>(int64_t, const float*, const float*, float*);
template void gelu_backward<double>(int64_t, const double*, const double*, double*);

}  // namespace zdl::kernels::cpu

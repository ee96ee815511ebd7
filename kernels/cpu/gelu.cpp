#include "kernels/cpu/gelu.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/cpu/compute_type.h"
#include "kernels/cpu/eigen.h"
#include "kernels/cpu/parallel.h"

namespace zdl::kernels::cpu {

namespace {
constexpr double kGeluScale = 0.7978845608028654;  // sqrt(2/pi)
constexpr double kGeluCube = 0.044715;
constexpr int64_t kBlock = 512;

// t[i] = tanh(k (x[i] + c x[i]^3)) for a block. libm's tanhf does not vectorize and was a
// sixth of a small GPT's training step; Eigen's float tanh is a vectorized rational
// approximation (max error a few ulp). f64 keeps std::tanh, for gradient checks.
template <class T>
void tanh_inner(int64_t n, const T* x, T* t) {
  const T k = static_cast<T>(kGeluScale), c = static_cast<T>(kGeluCube);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) t[i] = k * (x[i] + c * x[i] * x[i] * x[i]);
  if constexpr (std::is_same_v<T, float>) {
    Eigen::Map<Eigen::ArrayXf> a(t, n);
    a = a.tanh();
  } else {
    for (int64_t i = 0; i < n; ++i) t[i] = std::tanh(t[i]);
  }
}
}  // namespace

// bf16 blocks are converted to f32 (on the stack) and computed as f32 ones.
template <class T>
void gelu_forward(int64_t n, const T* x, T* out) {
  using C = compute_t<T>;
  parallel_for(n, 8, [&](int64_t lo, int64_t hi) {
    alignas(64) C xb[kBlock];
    alignas(64) C t[kBlock];
    for (int64_t b = lo; b < hi; b += kBlock) {
      int64_t m = std::min(kBlock, hi - b);
      const C* xc = load_compute(x + b, m, xb);
      tanh_inner(m, xc, t);
#pragma omp simd
      for (int64_t i = 0; i < m; ++i) out[b + i] = static_cast<T>(C(0.5) * xc[i] * (C(1) + t[i]));
    }
  });
}

template <class T>
void gelu_backward(int64_t n, const T* x, const T* dout, T* dx) {
  using C = compute_t<T>;
  const C k = static_cast<C>(kGeluScale), c = static_cast<C>(kGeluCube);
  parallel_for(n, 8, [&](int64_t lo, int64_t hi) {
    alignas(64) C xb[kBlock];
    alignas(64) C gb[kBlock];
    alignas(64) C tb[kBlock];
    for (int64_t b = lo; b < hi; b += kBlock) {
      int64_t m = std::min(kBlock, hi - b);
      const C* xc = load_compute(x + b, m, xb);
      const C* gc = load_compute(dout + b, m, gb);
      tanh_inner(m, xc, tb);
#pragma omp simd
      for (int64_t i = 0; i < m; ++i) {
        // u = k (x + c x^3), t = tanh(u):  gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2)
        C v = xc[i], t = tb[i];
        C local = C(0.5) * (C(1) + t) + C(0.5) * v * (C(1) - t * t) * k * (C(1) + C(3) * c * v * v);
        dx[b + i] = static_cast<T>(gc[i] * local);
      }
    }
  });
}

template void gelu_forward<float>(int64_t, const float*, float*);
template void gelu_forward<double>(int64_t, const double*, double*);
template void gelu_backward<float>(int64_t, const float*, const float*, float*);
template void gelu_backward<double>(int64_t, const double*, const double*, double*);
template void gelu_forward<BFloat16>(int64_t, const BFloat16*, BFloat16*);
template void gelu_backward<BFloat16>(int64_t, const BFloat16*, const BFloat16*, BFloat16*);

}  // namespace zdl::kernels::cpu

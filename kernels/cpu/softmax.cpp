#include "kernels/cpu/softmax.h"

#include <cmath>

#include "kernels/cpu/parallel.h"

namespace zdl::kernels::cpu {

template <class T>
void softmax_forward(int64_t rows, int64_t C, const T* x, T* out) {
  parallel_for(rows, 4 * C, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * C;
      T* yr = out + r * C;
      T mx = xr[0];
      for (int64_t c = 1; c < C; ++c) mx = xr[c] > mx ? xr[c] : mx;
      double s = 0.0;
      for (int64_t c = 0; c < C; ++c) {
        T e = std::exp(xr[c] - mx);
        yr[c] = e;
        s += static_cast<double>(e);
      }
      const T inv = static_cast<T>(1.0 / s);
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) yr[c] *= inv;
    }
  });
}

template <class T>
void softmax_backward(int64_t rows, int64_t C, const T* y, const T* dout, T* dx) {
  parallel_for(rows, 3 * C, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* yr = y + r * C;
      const T* gr = dout + r * C;
      T* dr = dx + r * C;
      double dot = 0.0;
#pragma omp simd reduction(+ : dot)
      for (int64_t c = 0; c < C; ++c) dot += static_cast<double>(gr[c]) * static_cast<double>(yr[c]);
      const T d = static_cast<T>(dot);
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) dr[c] = yr[c] * (gr[c] - d);
    }
  });
}

template void softmax_forward<float>(int64_t, int64_t, const float*, float*);
template void softmax_forward<double>(int64_t, int64_t, const double*, double*);
template void softmax_backward<float>(int64_t, int64_t, const float*, const float*, float*);
template void softmax_backward<double>(int64_t, int64_t, const double*, const double*, double*);

}  // namespace zdl::kernels::cpu

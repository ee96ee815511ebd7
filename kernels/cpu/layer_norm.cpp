#include "kernels/cpu/layer_norm.h"

#include <cmath>
#include <cstddef>
#include <vector>

#include "kernels/cpu/compute_type.h"
#include "kernels/cpu/parallel.h"

namespace zdl::kernels::cpu {

template <class T>
void layer_norm_forward(int64_t rows, int64_t C, const T* x, const T* weight, const T* bias, double eps, T* out,
                        compute_t<T>* mean, compute_t<T>* rstd) {
  using A = compute_t<T>;
  parallel_for(rows, 4 * C, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * C;
      T* yr = out + r * C;
      // Two passes (mean, then squared deviations): no cancellation for rows with a large mean.
      double s = 0.0;
#pragma omp simd reduction(+ : s)
      for (int64_t c = 0; c < C; ++c) s += static_cast<double>(xr[c]);
      double m = s / static_cast<double>(C);
      double v = 0.0;
#pragma omp simd reduction(+ : v)
      for (int64_t c = 0; c < C; ++c) {
        double d = static_cast<double>(xr[c]) - m;
        v += d * d;
      }
      double rs = 1.0 / std::sqrt(v / static_cast<double>(C) + eps);
      const A tm = static_cast<A>(m), trs = static_cast<A>(rs);
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) {
        A n = (static_cast<A>(xr[c]) - tm) * trs;
        if (weight) n *= static_cast<A>(weight[c]);
        if (bias) n += static_cast<A>(bias[c]);
        yr[c] = static_cast<T>(n);
      }
      mean[r] = tm;
      rstd[r] = trs;
    }
  });
}

template <class T>
void layer_norm_backward(int64_t rows, int64_t C, const T* x, const T* weight, const compute_t<T>* mean,
                         const compute_t<T>* rstd, const T* dout, T* dx, T* dweight, T* dbias) {
  using A = compute_t<T>;
  if (dx) {
    parallel_for(rows, 6 * C, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* xr = x + r * C;
        const T* gr = dout + r * C;
        T* dxr = dx + r * C;
        const A m = mean[r], rs = rstd[r];
        double sum_g = 0.0, sum_gx = 0.0;  // sum_c g, sum_c g * xhat
#pragma omp simd reduction(+ : sum_g, sum_gx)
        for (int64_t c = 0; c < C; ++c) {
          double g = static_cast<double>(gr[c]) * (weight ? static_cast<double>(weight[c]) : 1.0);
          sum_g += g;
          sum_gx += g * static_cast<double>((static_cast<A>(xr[c]) - m) * rs);
        }
        const A mg = static_cast<A>(sum_g / static_cast<double>(C));
        const A mgx = static_cast<A>(sum_gx / static_cast<double>(C));
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) {
          A g = weight ? static_cast<A>(gr[c]) * static_cast<A>(weight[c]) : static_cast<A>(gr[c]);
          A xhat = (static_cast<A>(xr[c]) - m) * rs;
          dxr[c] = static_cast<T>(rs * (g - mg - xhat * mgx));
        }
      }
    });
  }
  if (dweight || dbias) {
    // Columns split across threads; each walks all rows in order (deterministic sums).
    parallel_for(C, 3 * rows, [&](int64_t c0, int64_t c1) {
      size_t w = static_cast<size_t>(c1 - c0);
      std::vector<double> aw(w, 0.0), ab(w, 0.0);
      double* pw = aw.data();
      double* pb = ab.data();
      for (int64_t r = 0; r < rows; ++r) {
        const T* xr = x + r * C;
        const T* gr = dout + r * C;
        const A m = mean[r], rs = rstd[r];
#pragma omp simd
        for (int64_t c = c0; c < c1; ++c) {
          double g = static_cast<double>(gr[c]);
          pw[c - c0] += g * static_cast<double>((static_cast<A>(xr[c]) - m) * rs);
          pb[c - c0] += g;
        }
      }
      for (int64_t c = c0; c < c1; ++c) {
        if (dweight) dweight[c] = static_cast<T>(static_cast<A>(aw[c - c0]));
        if (dbias) dbias[c] = static_cast<T>(static_cast<A>(ab[c - c0]));
      }
    });
  }
}

template void layer_norm_forward<float>(int64_t, int64_t, const float*, const float*, const float*, double, float*,
                                        float*, float*);
template void layer_norm_forward<double>(int64_t, int64_t, const double*, const double*, const double*, double,
                                         double*, double*, double*);
template void layer_norm_backward<float>(int64_t, int64_t, const float*, const float*, const float*, const float*,
                                         const float*, float*, float*, float*);
template void layer_norm_backward<double>(int64_t, int64_t, const double*, const double*, const double*,
                                          const double*, const double*, double*, double*, double*);
template void layer_norm_forward<BFloat16>(int64_t, int64_t, const BFloat16*, const BFloat16*, const BFloat16*, double,
                                           BFloat16*, float*, float*);
template void layer_norm_backward<BFloat16>(int64_t, int64_t, const BFloat16*, const BFloat16*, const float*,
                                            const float*, const BFloat16*, BFloat16*, BFloat16*, BFloat16*);

}  // namespace zdl::kernels::cpu

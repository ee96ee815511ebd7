#include "kernels/cpu/optim.h"

#include <algorithm>
#include <vector>

#include <cmath>

#include "kernels/cpu/parallel.h"

namespace zdl::kernels::cpu {

namespace {
// Widens a value for arithmetic: bf16 through float, everything else directly.
template <class A, class G>
inline A widen(G x) {
  if constexpr (std::is_same_v<G, BFloat16>) return static_cast<A>(static_cast<float>(x));
  else return static_cast<A>(x);
}
}  // namespace

template <class T, class G>
void adamw_update(int64_t n, T* param, const G* grad, opt_state_t<T>* m, opt_state_t<T>* v, const AdamWParams& h,
                  double grad_scale) {
  const double bc1 = 1.0 - std::pow(h.beta1, static_cast<double>(h.step));
  const double bc2 = 1.0 - std::pow(h.beta2, static_cast<double>(h.step));
  // Math in the parameter's precision class: f32 for f32/bf16 masters, f64 for f64 checks.
  using A = opt_state_t<T>;
  const A b1 = static_cast<A>(h.beta1), b2 = static_cast<A>(h.beta2), eps = static_cast<A>(h.eps);
  const A lr = static_cast<A>(h.lr), wd = static_cast<A>(h.weight_decay), gs = static_cast<A>(grad_scale);
  const A inv_bc1 = static_cast<A>(1.0 / bc1), inv_sqrt_bc2 = static_cast<A>(1.0 / std::sqrt(bc2));
  // Each operation rounds on its own (this file is compiled with -ffp-contract=off: no FMA), as
  // the CUDA kernel's _rn intrinsics do, so the update has the same bits on the host and the GPU.
  parallel_for(n, 8, [&](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) {
      A g = widen<A>(grad[i]) * gs;
      A mi = b1 * static_cast<A>(m[i]) + (1 - b1) * g;
      A vi = b2 * static_cast<A>(v[i]) + (1 - b2) * g * g;
      m[i] = mi;
      v[i] = vi;
      A p = static_cast<A>(param[i]);
      A update = (mi * inv_bc1) / (std::sqrt(vi) * inv_sqrt_bc2 + eps) + wd * p;
      param[i] = static_cast<T>(p - lr * update);
    }
  });
}

template <class T>
void sgd_update(int64_t n, T* param, const T* grad, opt_state_t<T>* buf, double lr, double momentum, double weight_decay,
                double grad_scale) {
  parallel_for(n, 4, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      double g = static_cast<double>(grad[i]) * grad_scale + weight_decay * static_cast<double>(param[i]);
      double b = momentum > 0 ? momentum * buf[i] + g : g;
      if (momentum > 0) buf[i] = static_cast<opt_state_t<T>>(b);
      param[i] = static_cast<T>(static_cast<double>(param[i]) - lr * b);
    }
  });
}

template <class T>
double sum_squares(int64_t n, const T* x) {
  // Fixed chunks summed in order: the same bits for any thread count.
  constexpr int64_t kChunk = 1 << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> part(static_cast<size_t>(chunks), 0.0);
  parallel_for(chunks, kChunk, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double s = 0.0;
      for (int64_t i = c * kChunk, end = std::min(n, (c + 1) * kChunk); i < end; ++i) {
        double v = widen<double>(x[i]);
        s += v * v;
      }
      part[static_cast<size_t>(c)] = s;
    }
  });
  double total = 0.0;
  for (double p : part) total += p;
  return total;
}

template void adamw_update<float, float>(int64_t, float*, const float*, float*, float*, const AdamWParams&, double);
template void adamw_update<float, BFloat16>(int64_t, float*, const BFloat16*, float*, float*, const AdamWParams&,
                                            double);
template void adamw_update<double, double>(int64_t, double*, const double*, double*, double*, const AdamWParams&,
                                           double);
template void sgd_update<float>(int64_t, float*, const float*, float*, double, double, double, double);
template void sgd_update<double>(int64_t, double*, const double*, double*, double, double, double, double);
template double sum_squares<float>(int64_t, const float*);
template double sum_squares<double>(int64_t, const double*);
template double sum_squares<BFloat16>(int64_t, const BFloat16*);

}  // namespace zdl::kernels::cpu

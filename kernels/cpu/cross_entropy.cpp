#include "kernels/cpu/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <type_traits>
#include <vector>

#include "kernels/cpu/compute_type.h"
#include "kernels/cpu/parallel.h"

namespace zdl::kernels::cpu {

template <class I>
int64_t cross_entropy_first_bad_target(int64_t N, const I* targets, int64_t V, int64_t ignore_index, int64_t* count) {
  int64_t bad = -1, c = 0;
  for (int64_t n = 0; n < N; ++n) {
    int64_t t = static_cast<int64_t>(targets[n]);
    if (t == ignore_index) continue;
    if ((t < 0 || t >= V) && bad < 0) bad = n;
    ++c;
  }
  *count = c;
  return bad;
}

template <class T, class I>
double cross_entropy_forward(int64_t N, int64_t V, int64_t ld, const T* logits, const I* targets,
                             int64_t ignore_index, compute_t<T>* row_max, compute_t<T>* row_lse) {
  using A = compute_t<T>;
  std::vector<double> row_loss(static_cast<size_t>(N), 0.0);
  parallel_for(N, 3 * V, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      int64_t t = static_cast<int64_t>(targets[n]);
      if (t == ignore_index) {
        row_max[n] = A(0);
        row_lse[n] = A(0);
        continue;
      }
      const T* x = logits + n * ld;
      A mx = static_cast<A>(x[0]);
      for (int64_t v = 1; v < V; ++v) mx = static_cast<A>(x[v]) > mx ? static_cast<A>(x[v]) : mx;
      double s = 0.0;
      for (int64_t v = 0; v < V; ++v) s += static_cast<double>(std::exp(static_cast<A>(x[v]) - mx));
      double lse = std::log(s);
      row_max[n] = mx;
      row_lse[n] = static_cast<A>(lse);
      // -log p_t = -(x_t - max - lse)
      row_loss[n] = static_cast<double>(mx) + lse - static_cast<double>(x[t]);
    }
  });
  double total = 0.0;
  for (int64_t n = 0; n < N; ++n) total += row_loss[n];
  return total;
}

template <class T, class I>
void cross_entropy_backward(int64_t N, int64_t V, int64_t ld, const T* logits, const I* targets,
                            int64_t ignore_index, const compute_t<T>* row_max, const compute_t<T>* row_lse,
                            double scale, T* dlogits) {
  using A = compute_t<T>;
  const A s = static_cast<A>(scale);
  parallel_for(N, 2 * ld, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      T* d = dlogits + n * ld;
      int64_t t = static_cast<int64_t>(targets[n]);
      if (t == ignore_index) {
        std::fill_n(d, ld, T(0));
        continue;
      }
      const T* x = logits + n * ld;
      const A shift = row_max[n] + row_lse[n];
      if constexpr (std::is_same_v<T, A>) {
        for (int64_t v = 0; v < V; ++v) d[v] = s * std::exp(x[v] - shift);
        d[t] -= s;
      } else {  // bf16: p_t - 1 rounded once, so formed before the loop overwrites x (d may be x)
        A at_target = s * std::exp(static_cast<A>(x[t]) - shift);
        at_target -= s;  // two statements, as the f32 path's (clang fuses a*b - c within one)
        for (int64_t v = 0; v < V; ++v) d[v] = static_cast<T>(s * std::exp(static_cast<A>(x[v]) - shift));
        d[t] = static_cast<T>(at_target);
      }
      std::fill(d + V, d + ld, T(0));
    }
  });
}

#define ZDL_CE_INSTANTIATE(T, I)                                                                                   \
  template double cross_entropy_forward<T, I>(int64_t, int64_t, int64_t, const T*, const I*, int64_t, compute_t<T>*, \
                                              compute_t<T>*);                                                       \
  template void cross_entropy_backward<T, I>(int64_t, int64_t, int64_t, const T*, const I*, int64_t,                \
                                             const compute_t<T>*, const compute_t<T>*, double, T*);
ZDL_CE_INSTANTIATE(float, int32_t)
ZDL_CE_INSTANTIATE(float, int64_t)
ZDL_CE_INSTANTIATE(double, int32_t)
ZDL_CE_INSTANTIATE(double, int64_t)
ZDL_CE_INSTANTIATE(BFloat16, int32_t)
ZDL_CE_INSTANTIATE(BFloat16, int64_t)
#undef ZDL_CE_INSTANTIATE
template int64_t cross_entropy_first_bad_target<int32_t>(int64_t, const int32_t*, int64_t, int64_t, int64_t*);
template int64_t cross_entropy_first_bad_target<int64_t>(int64_t, const int64_t*, int64_t, int64_t, int64_t*);

}  // namespace zdl::kernels::cpu

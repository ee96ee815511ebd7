#include "kernels/cpu/reduce.h"

#include <cstddef>
#include <vector>

#include "kernels/cpu/compute_type.h"
#include "kernels/cpu/parallel.h"

namespace zdl::kernels::cpu {

template <class T>
void sum_reduce(int64_t outer, int64_t reduce, int64_t inner, const T* x, T* out) {
  // The double sum rounds to the compute type first (bf16: as the f32 kernel's result would be).
  auto store = [](double v) { return static_cast<T>(static_cast<compute_t<T>>(v)); };
  if (inner == 1) {
    parallel_for(outer, reduce, [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o) {
        const T* p = x + o * reduce;
        double acc = 0.0;
#pragma omp simd reduction(+ : acc)
        for (int64_t r = 0; r < reduce; ++r) acc += static_cast<double>(p[r]);
        out[o] = store(acc);
      }
    });
    return;
  }
  // Column sums: each thread owns a block of columns and walks the rows in order, so the
  // inner loop is contiguous and vectorizes.
  for (int64_t o = 0; o < outer; ++o) {
    const T* base = x + o * reduce * inner;
    T* dst = out + o * inner;
    parallel_for(inner, reduce, [&](int64_t i0, int64_t i1) {
      std::vector<double> acc(static_cast<size_t>(i1 - i0), 0.0);
      for (int64_t r = 0; r < reduce; ++r) {
        const T* row = base + r * inner;
#pragma omp simd
        for (int64_t i = i0; i < i1; ++i) acc[i - i0] += static_cast<double>(row[i]);
      }
      for (int64_t i = i0; i < i1; ++i) dst[i] = store(acc[i - i0]);
    });
  }
}

template void sum_reduce<float>(int64_t, int64_t, int64_t, const float*, float*);
template void sum_reduce<double>(int64_t, int64_t, int64_t, const double*, double*);
template void sum_reduce<BFloat16>(int64_t, int64_t, int64_t, const BFloat16*, BFloat16*);

}  // namespace zdl::kernels::cpu

#include "kernels/cpu/embedding.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/cpu/compute_type.h"
#include "kernels/cpu/parallel.h"

namespace zdl::kernels::cpu {

template <class I>
int64_t embedding_first_bad_id(int64_t n, const I* ids, int64_t V) {
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || static_cast<int64_t>(ids[i]) >= V) return i;
  return -1;
}

template <class T, class I>
void embedding_forward(int64_t n, int64_t C, const T* weight, const I* ids, T* out) {
  parallel_for(n, C, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) std::copy_n(weight + static_cast<int64_t>(ids[i]) * C, C, out + i * C);
  });
}

template <class T, class I>
void embedding_backward(int64_t n, int64_t V, int64_t C, const I* ids, const T* dout, T* dweight) {
  std::fill_n(dweight, V * C, T(0));
  if constexpr (std::is_same_v<T, compute_t<T>>) {
    parallel_for(C, n, [&](int64_t c0, int64_t c1) {
      for (int64_t i = 0; i < n; ++i) {
        T* dst = dweight + static_cast<int64_t>(ids[i]) * C;
        const T* src = dout + i * C;
#pragma omp simd
        for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
      }
    });
  } else {
    // bf16: the rows that are looked up are summed in f32, in position order as above, then
    // rounded once. One f32 row per distinct id (at most n), not a [V, C] f32 copy.
    using A = compute_t<T>;
    std::vector<int64_t> slot(static_cast<size_t>(V), -1), row_of;
    for (int64_t i = 0; i < n; ++i) {
      int64_t& sl = slot[static_cast<size_t>(ids[i])];
      if (sl < 0) {
        sl = static_cast<int64_t>(row_of.size());
        row_of.push_back(static_cast<int64_t>(ids[i]));
      }
    }
    const int64_t rows = static_cast<int64_t>(row_of.size());
    std::vector<A> acc(static_cast<size_t>(rows * C), A(0));
    parallel_for(C, n, [&](int64_t c0, int64_t c1) {
      for (int64_t i = 0; i < n; ++i) {
        A* dst = acc.data() + slot[static_cast<size_t>(ids[i])] * C;
        const T* src = dout + i * C;
#pragma omp simd
        for (int64_t c = c0; c < c1; ++c) dst[c] += static_cast<A>(src[c]);
      }
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = c0; c < c1; ++c) dweight[row_of[r] * C + c] = static_cast<T>(acc[r * C + c]);
    });
  }
}

template int64_t embedding_first_bad_id<int32_t>(int64_t, const int32_t*, int64_t);
template int64_t embedding_first_bad_id<int64_t>(int64_t, const int64_t*, int64_t);
template void embedding_forward<float, int32_t>(int64_t, int64_t, const float*, const int32_t*, float*);
template void embedding_forward<float, int64_t>(int64_t, int64_t, const float*, const int64_t*, float*);
template void embedding_forward<double, int32_t>(int64_t, int64_t, const double*, const int32_t*, double*);
template void embedding_forward<double, int64_t>(int64_t, int64_t, const double*, const int64_t*, double*);
template void embedding_backward<float, int32_t>(int64_t, int64_t, int64_t, const int32_t*, const float*, float*);
template void embedding_backward<float, int64_t>(int64_t, int64_t, int64_t, const int64_t*, const float*, float*);
template void embedding_backward<double, int32_t>(int64_t, int64_t, int64_t, const int32_t*, const double*, double*);
template void embedding_backward<double, int64_t>(int64_t, int64_t, int64_t, const int64_t*, const double*, double*);
template void embedding_forward<BFloat16, int32_t>(int64_t, int64_t, const BFloat16*, const int32_t*, BFloat16*);
template void embedding_forward<BFloat16, int64_t>(int64_t, int64_t, const BFloat16*, const int64_t*, BFloat16*);
template void embedding_backward<BFloat16, int32_t>(int64_t, int64_t, int64_t, const int32_t*, const BFloat16*,
                                                    BFloat16*);
template void embedding_backward<BFloat16, int64_t>(int64_t, int64_t, int64_t, const int64_t*, const BFloat16*,
                                                    BFloat16*);

}  // namespace zdl::kernels::cpu

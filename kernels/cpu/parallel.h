// How CPU kernels split work across threads (OpenMP). Small loops stay serial: a parallel
// region costs a few microseconds, more than adding 10k floats.
#pragma once
#include <cstdint>

#include <omp.h>

namespace zdl::kernels::cpu {

// Elements below which an elementwise loop runs on one thread.
constexpr int64_t kParallelGrain = 1 << 15;

inline bool worth_parallel(int64_t work) { return work >= kParallelGrain && omp_get_max_threads() > 1; }

// Runs f(begin, end) over [0, n) split into contiguous chunks, one per thread when worth it.
template <class F>
void parallel_for(int64_t n, int64_t work_per_item, F&& f) {
  if (!worth_parallel(n * work_per_item)) {
    f(int64_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    int nt = omp_get_num_threads(), t = omp_get_thread_num();
    int64_t chunk = (n + nt - 1) / nt;
    int64_t b = t * chunk, e = b + chunk < n ? b + chunk : n;
    if (b < e) f(b, e);
  }
}

// Runs row(r, lo, hi) over elements [lo, hi) of every row r of `rows` rows of `inner` elements,
// split across threads by rows, or, for a single row (a flat buffer coalesces to one), by its
// elements.
template <class Row>
void parallel_rows(int64_t rows, int64_t inner, Row&& row) {
  if (rows == 1) {
    parallel_for(inner, 1, [&](int64_t lo, int64_t hi) { row(0, lo, hi); });
  } else {
    parallel_for(rows, inner, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) row(r, 0, inner);
    });
  }
}

}  // namespace zdl::kernels::cpu

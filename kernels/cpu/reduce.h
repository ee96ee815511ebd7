// Sum reductions over a contiguous buffer viewed as [outer, reduce, inner]:
// out[o, i] = sum_r x[o, r, i]. Covers row sums (inner = 1), column sums (outer = 1, e.g.
// bias gradients over B*T rows) and everything between. Accumulates in double for f32 rows
// so long reductions keep f32 accuracy. T: float, double, BFloat16 (the double sum rounded to
// f32, then to bf16: the f32 kernel's result, rounded once more, compute_type.h).
#pragma once
#include <cstdint>

namespace zdl::kernels::cpu {

template <class T>
void sum_reduce(int64_t outer, int64_t reduce, int64_t inner, const T* x, T* out);

}  // namespace zdl::kernels::cpu

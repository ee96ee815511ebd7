// Fused softmax + cross-entropy over rows of logits (N, V) with integer targets (N) of type
// I (int32_t or int64_t); rows whose target equals ignore_index are skipped. Rows are ld >= V
// elements apart: a GPT head's logits are padded to a friendlier width (50257 -> 50304), and
// the classes are the first V columns; the padding is never read, and its gradient is 0.
//
// Forward keeps only two numbers per row, the max and lse = log sum_v exp(x_v - max), not
// the (N, V) probabilities: for a GPT head V is 50k, so saving probabilities would double
// the largest activation. Backward recomputes p_v = exp(x_v - max - lse) from them:
//   loss = (1/count) sum_rows (max + lse - x_target)
//   dlogits[n, v] = dloss / count * (p_v - [v == target_n]),  0 on ignored rows.
//
// T: float, double, BFloat16 (computed in f32 with f32 row statistics, compute_type.h).
#pragma once
#include <cstdint>

#include "kernels/cpu/compute_type.h"

namespace zdl::kernels::cpu {

// Scans targets: returns the position of the first target outside [0, V) that is not
// ignore_index (or -1), and writes the number of non-ignored rows to *count.
template <class I>
int64_t cross_entropy_first_bad_target(int64_t N, const I* targets, int64_t V, int64_t ignore_index, int64_t* count);

// Writes row_max, row_lse (N) and returns the sum of the per-row losses over non-ignored rows,
// added in row order (deterministic). Ignored rows get max = lse = 0.
template <class T, class I>
double cross_entropy_forward(int64_t N, int64_t V, int64_t ld, const T* logits, const I* targets,
                             int64_t ignore_index, compute_t<T>* row_max, compute_t<T>* row_lse);

// dlogits (N rows of ld) = scale * (softmax - onehot) on non-ignored rows, 0 on ignored rows
// and in the padding. scale = dloss / count. dlogits may be logits itself (each element is read
// before it is written): the gradient then replaces the logits, which the backward no longer needs.
template <class T, class I>
void cross_entropy_backward(int64_t N, int64_t V, int64_t ld, const T* logits, const I* targets,
                            int64_t ignore_index, const compute_t<T>* row_max, const compute_t<T>* row_lse,
                            double scale, T* dlogits);

}  // namespace zdl::kernels::cpu

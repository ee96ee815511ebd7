// Fused softmax + cross-entropy over rows of logits (N, V) on CUDA; the CPU twin
// (kernels/cpu/cross_entropy.h) is the test oracle. Rows are ld >= V elements apart (a padded
// vocabulary: the classes are the first V columns, the padding gets a zero gradient). Logits f32 or bf16, targets i32 or i64
// (checked with scan_indices, kernels/cuda/embedding.h, whose workspace holds the count of
// rows the kernels read), rows whose target equals ignore_index skipped, and rows whose target
// is out of range too (their check fails at the host's next wait). The statistics (row max, lse = log sum exp(x - max)), the per-row
// losses and the loss are f32 whatever the logits' dtype.
//
// Choices:
// - One block per row: a GPT head's row is V = 50304 wide, far more than a warp should walk.
//   One read of the row (a running maximum and a rescaled sum of exponentials), the sum
//   accumulated in f64 per thread and over the block (the CPU twin sums in f64 too; it costs
//   nothing next to the memory traffic, and keeps lse exact to f32 for any V).
// - The [N, V] probabilities are never written: backward recomputes them from (max, lse).
// - The mean is a fixed-order reduction of the per-row losses in one block (f64), not
//   atomics: the loss is bit-identical from run to run.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace zdl::kernels::cuda {

// Writes row_max, row_lse and row_loss (N, f32; 0 on ignored rows) and loss[0] =
// sum(row_loss) / count (f32; *count on the device = non-ignored rows, from scan_indices; 0
// when it is 0).
void cross_entropy_forward(DType dtype, DType idtype, int64_t N, int64_t V, int64_t ld, const void* logits,
                           const void* targets, int64_t ignore_index, const unsigned long long* count,
                           float* row_max, float* row_lse, float* row_loss, float* loss);

// dlogits (N rows of ld, the logits' dtype) = scale * (softmax - onehot) on non-ignored rows,
// 0 on ignored rows (their logits unread) and in the padding, with scale = dloss[0] / *count
// read on the device (no host wait; 0 when the count is 0). dlogits may be logits (the gradient
// replaces them in place).
void cross_entropy_backward(DType dtype, DType idtype, int64_t N, int64_t V, int64_t ld, const void* logits,
                            const void* targets, int64_t ignore_index, const float* row_max, const float* row_lse,
                            const float* dloss, const unsigned long long* count, void* dlogits);

}  // namespace zdl::kernels::cuda

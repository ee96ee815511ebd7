// Global-norm gradient clipping, computed once over all gradients.
//
//   double norm = optim::grad_norm(model->parameters());
//   opt.step(optim::clip_scale(norm, /*max_norm=*/1.0));    // folds the scale into the update
#pragma once
#include <vector>

#include "core/tensor.h"

namespace zdl::optim {

// Sum of squares of all defined gradients (the distributed version all-reduces this).
double grad_sum_squares(const std::vector<Tensor>& params);
// sqrt of grad_sum_squares.
double grad_norm(const std::vector<Tensor>& params);
// Added to the norm in clip_scale: the clipped norm lands just under max_norm.
inline constexpr double kClipNormEpsilon = 1e-6;
// The factor that brings `norm` down to max_norm: max_norm / (norm + kClipNormEpsilon), 1 when
// already below, or max_norm <= 0. The one formula for single-process and ZeRO clipping
// (ZeroPartitioner::clip_grad_norm calls it).
double clip_scale(double norm, double max_norm);

}  // namespace zdl::optim

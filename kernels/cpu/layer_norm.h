// Layer normalization over the last dim of a contiguous [rows, C] buffer:
//   y = (x - mean) * rstd * weight + bias,  rstd = 1 / sqrt(var + eps)  (biased variance).
// Forward saves mean and rstd per row (2 * rows values) so backward never recomputes the
// statistics. Row statistics accumulate in double so f32 rows keep f32 accuracy.
// T: float, double, BFloat16; bf16 computes in f32 and keeps f32 statistics (compute_type.h).
// Pure functions; the differentiable op is zdl::layer_norm in autograd/ops/nn.cpp.
#pragma once
#include <cstdint>

#include "kernels/cpu/compute_type.h"

namespace zdl::kernels::cpu {

// x, out [rows, C]; weight, bias [C] (either may be null: weight 1, bias 0);
// mean, rstd [rows] are written.
template <class T>
void layer_norm_forward(int64_t rows, int64_t C, const T* x, const T* weight, const T* bias, double eps, T* out,
                        compute_t<T>* mean, compute_t<T>* rstd);

// Gradients from dout [rows, C]. Each output pointer may be null (not needed); all are
// overwritten, not accumulated (the autograd engine accumulates). dweight/dbias are column
// sums taken in row order by whichever thread owns the column, so they are bit-identical
// for any thread count.
//   xhat = (x - mean) rstd,  g = dout * weight
//   dx = rstd (g - mean_c(g) - xhat mean_c(g xhat)),  dweight = sum_rows dout xhat,  dbias = sum_rows dout
template <class T>
void layer_norm_backward(int64_t rows, int64_t C, const T* x, const T* weight, const compute_t<T>* mean,
                         const compute_t<T>* rstd, const T* dout, T* dx, T* dweight, T* dbias);

}  // namespace zdl::kernels::cpu

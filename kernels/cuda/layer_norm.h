// LayerNorm over the last dim of a contiguous [rows, C] buffer on CUDA; the CPU twin
// (kernels/cpu/layer_norm.h) is the test oracle:
//   y = (x - mean) * rstd * weight + bias,  rstd = 1 / sqrt(var + eps)  (biased variance).
// x, out, weight, bias, dout, dx, dweight, dbias have the op's dtype (f32 or bf16); the saved
// statistics mean and rstd are always f32, and all arithmetic is f32.
//
// Choices:
// - One warp per row (rows are independent; a warp reads a row coalesced, reduces with
//   shuffles, no shared memory, no __syncthreads). Statistics in two passes (mean, then
//   squared deviations) as the CPU twin: no cancellation for rows with a large mean.
// - dweight/dbias are column sums over all rows. No float atomics: the rows are cut into a
//   fixed number of chunks (a function of `rows` only), one thread per (column, chunk) sums
//   its chunk in row order into a workspace, then one thread per column adds the chunks in
//   chunk order. Bit-identical from run to run and on any GPU.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace zdl::kernels::cuda {

// x, out [rows, C]; weight, bias [C] or null (weight 1, bias 0); mean, rstd [rows] written.
void layer_norm_forward(DType dtype, int64_t rows, int64_t C, const void* x, const void* weight, const void* bias,
                        double eps, void* out, float* mean, float* rstd);

// Device bytes of workspace layer_norm_backward needs for dweight/dbias (0 if rows == 0).
size_t layer_norm_backward_workspace_bytes(int64_t rows, int64_t C);

// Gradients from dout [rows, C]; dx [rows, C], dweight, dbias [C] may each be null (not
// needed) and are overwritten. `workspace` has layer_norm_backward_workspace_bytes(rows, C)
// bytes when dweight or dbias is wanted (else may be null).
//   xhat = (x - mean) rstd,  g = dout * weight
//   dx = rstd (g - mean_c(g) - xhat mean_c(g xhat)),  dweight = sum_rows dout xhat,  dbias = sum_rows dout
void layer_norm_backward(DType dtype, int64_t rows, int64_t C, const void* x, const void* weight, const float* mean,
                         const float* rstd, const void* dout, void* dx, void* dweight, void* dbias, void* workspace);

}  // namespace zdl::kernels::cuda

// Softmax over the last dim of a contiguous [rows, C] buffer on CUDA; the CPU twin
// (kernels/cpu/softmax.h) is the test oracle:
//   y = exp(x - max) / sum exp(x - max),   backward: dx = y * (dy - sum_c(dy * y)).
// f32 or bf16 buffers, f32 arithmetic. A warp per row when C <= 1024 (attention-sized rows),
// a block per row above (vocabulary-sized rows); reductions in a fixed order (deterministic).
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace zdl::kernels::cuda {

// out [rows, C] (may alias x).
void softmax_forward(DType dtype, int64_t rows, int64_t C, const void* x, void* out);

// dx [rows, C] from the forward output y and dout (dx may alias dout).
void softmax_backward(DType dtype, int64_t rows, int64_t C, const void* y, const void* dout, void* dx);

}  // namespace zdl::kernels::cuda

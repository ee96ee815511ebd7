// GELU (tanh approximation, as GPT-2) on CUDA; the CPU twin (kernels/cpu/gelu.h) is the test
// oracle and has the same formula:
//   gelu(x) = 0.5 x (1 + tanh(k (x + 0.044715 x^3))),  k = sqrt(2/pi).
// Type-erased entry points (no CUDA types here): contiguous buffers of f32 or bf16 on the
// current device, work queued on the compute stream. bf16 is loaded to f32, computed in f32,
// rounded once on store. Not bit-identical to the CPU (tanhf vs Eigen's vectorized tanh).
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace zdl::kernels::cuda {

// out[i] = gelu(x[i]) for n elements (out may alias x).
void gelu_forward(DType dtype, int64_t n, const void* x, void* out);

// dx[i] = dout[i] * gelu'(x[i]) (dx may alias dout).
void gelu_backward(DType dtype, int64_t n, const void* x, const void* dout, void* dx);

}  // namespace zdl::kernels::cuda

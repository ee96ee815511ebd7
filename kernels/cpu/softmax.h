// Softmax over the last dim of a contiguous [rows, C] buffer, max-subtracted for stability:
//   y = exp(x - max) / sum exp(x - max).
// Backward needs only the output: dx = y * (dy - sum_c(dy * y)).
// Other dims are handled by zdl::softmax (autograd/ops/nn.cpp) through transposes.
#pragma once
#include <cstdint>

namespace zdl::kernels::cpu {

// out [rows, C] (may alias x).
template <class T>
void softmax_forward(int64_t rows, int64_t C, const T* x, T* out);

// dx [rows, C] from the forward output y and dout (dx may alias dout).
template <class T>
void softmax_backward(int64_t rows, int64_t C, const T* y, const T* dout, T* dx);

}  // namespace zdl::kernels::cpu

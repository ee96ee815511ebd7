// GELU, tanh approximation (as GPT-2):
//   gelu(x) = 0.5 x (1 + tanh(k (x + 0.044715 x^3))),  k = sqrt(2/pi).
// Pure functions on contiguous buffers; the differentiable op is zdl::gelu in
// autograd/ops/nn.cpp. Backward recomputes tanh from x (saves no activation but x).
// T: float, double, BFloat16 (computed in f32, compute_type.h).
#pragma once
#include <cstdint>

namespace zdl::kernels::cpu {

// out[i] = gelu(x[i]) for n elements (out may alias x).
template <class T>
void gelu_forward(int64_t n, const T* x, T* out);

// dx[i] = dout[i] * gelu'(x[i]) (dx may alias dout).
template <class T>
void gelu_backward(int64_t n, const T* x, const T* dout, T* dx);

}  // namespace zdl::kernels::cpu

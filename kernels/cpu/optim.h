// Optimizer update kernels on flat buffers: one fused loop per parameter (or per flat shard
// under ZeRO). Pure functions; the optimizers in optim/ own the buffers.
#pragma once
#include <cstdint>
#include <type_traits>

#include "core/dtype.h"

namespace zdl::kernels::cpu {

struct AdamWParams {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  int64_t step = 1;  // 1-based, for bias correction
};

// Optimizer state precision: f32 for f32 (and bf16-master) parameters, f64 for f64 checks.
template <class T>
using opt_state_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Decoupled weight decay (Loshchilov & Hutter):
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= lr * ( (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd p )
// `grad_scale` multiplies g first (gradient clipping folded into the update).
// G is the gradient type: T itself, or bf16 gradients of a mixed-precision run (T = f32 master).
template <class T, class G = T>
void adamw_update(int64_t n, T* param, const G* grad, opt_state_t<T>* m, opt_state_t<T>* v, const AdamWParams& h,
                  double grad_scale);

// SGD with momentum (PyTorch's form): buf = mu buf + g (+ wd p); p -= lr buf.
template <class T>
void sgd_update(int64_t n, T* param, const T* grad, opt_state_t<T>* momentum_buf, double lr, double momentum,
                double weight_decay, double grad_scale);

// Sum of squares of n values, accumulated in double (for global gradient norms).
template <class T>
double sum_squares(int64_t n, const T* x);

}  // namespace zdl::kernels::cpu

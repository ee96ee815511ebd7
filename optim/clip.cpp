#include "optim/clip.h"

#include <cmath>

#include "kernels/cpu/optim.h"
#include "kernels/cpu/square_sum.h"

namespace zdl::optim {

// f32 and bf16 gradients: the exact sum (kernels/cpu/square_sum.h), the same bits as
// ZeroPartitioner::clip_grad_norm for any sharding; f64: summed in double.
double grad_sum_squares(const std::vector<Tensor>& params) {
  kernels::cpu::ExactSquareSum exact;
  double f64 = 0.0;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (!g.is_contiguous()) g = g.contiguous_copy();
    if (!g.device().is_cpu()) g = g.to(Device::cpu());
    if (g.dtype() == DType::F32) exact.add(g.numel(), g.data<float>());
    else if (g.dtype() == DType::BF16) exact.add(g.numel(), g.data<BFloat16>());
    else if (g.dtype() == DType::F64) f64 += kernels::cpu::sum_squares<double>(g.numel(), g.data<double>());
    else throw Error(detail::str("grad_norm: gradients must be f32, bf16 or f64, got ", dtype_name(g.dtype())));
  }
  return exact.value() + f64;
}

double grad_norm(const std::vector<Tensor>& params) { return std::sqrt(grad_sum_squares(params)); }

double clip_scale(double norm, double max_norm) {
  if (max_norm <= 0.0 || !(norm > max_norm)) return 1.0;
  return max_norm / (norm + kClipNormEpsilon);
}

}  // namespace zdl::optim

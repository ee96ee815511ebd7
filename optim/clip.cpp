#include "optim/clip.h"

#include <cmath>

#include "kernels/cpu/optim.h"

namespace zdl::optim {

double grad_sum_squares(const std::vector<Tensor>& params) {
  double total = 0.0;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (!g.is_contiguous()) g = g.contiguous_copy();
    if (!g.device().is_cpu()) g = g.to(Device::cpu());
    total += ZDL_DISPATCH_FLOAT(g.dtype(), "grad_norm", [&](auto tag) {
      using T = decltype(tag);
      return kernels::cpu::sum_squares<T>(g.numel(), g.data<T>());
    });
  }
  return total;
}

double grad_norm(const std::vector<Tensor>& params) { return std::sqrt(grad_sum_squares(params)); }

double clip_scale(double norm, double max_norm) {
  if (max_norm <= 0.0 || !(norm > max_norm)) return 1.0;
  return max_norm / (norm + 1e-6);
}

}  // namespace zdl::optim

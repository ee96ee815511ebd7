#include "gradcheck.h"

#include <algorithm>
#include <cmath>

namespace zdl::testing {

Tensor rand_noncontiguous_leaf(const Shape& shape, uint64_t seed) {
  Shape swapped = shape;
  std::swap(swapped[swapped.size() - 1], swapped[swapped.size() - 2]);
  Tensor base = Tensor::rand(swapped, seed, DType::F64, Device::cpu(), 0, -1.0, 1.0);
  Tensor view = transpose(base, -1, -2).detach();
  view.set_requires_grad(true);
  return view;
}

double gradcheck_error(const Fn& f, std::vector<Tensor> inputs, double h) {
  constexpr double kFloor = 1e-2;
  // Fixed random weighting of the outputs.
  Tensor probe;
  {
    NoGradGuard ng;
    probe = f(inputs);
  }
  Tensor w = Tensor::rand(probe.shape(), 12345, DType::F64, Device::cpu(), 7, -1.0, 1.0);
  auto loss_value = [&]() {
    NoGradGuard ng;
    return sum(mul(f(inputs), w)).item();
  };

  for (auto& x : inputs)
    if (x.requires_grad()) x.set_grad(Tensor());
  Tensor loss = sum(mul(f(inputs), w));
  loss.backward();

  double worst = 0.0;
  for (auto& x : inputs) {
    if (!x.requires_grad()) continue;
    Tensor g = x.grad();
    EXPECT_TRUE(g.defined()) << "no gradient reached an input of shape " << shape_str(x.shape());
    if (!g.defined()) return 1e9;
    std::vector<double> analytic = g.to_vector();
    // Perturb element by element through a contiguous index walk of the view.
    std::vector<double> numeric(analytic.size());
    Shape idx(x.dim(), 0);
    for (size_t flat = 0; flat < numeric.size(); ++flat) {
      int64_t off = x.offset();
      for (int64_t d = 0; d < x.dim(); ++d) off += idx[d] * x.strides()[d];
      double* p = static_cast<double*>(x.storage()->data()) + off;
      double orig = *p;
      *p = orig + h;
      double lp = loss_value();
      *p = orig - h;
      double lm = loss_value();
      *p = orig;
      numeric[flat] = (lp - lm) / (2 * h);
      for (int64_t d = x.dim() - 1; d >= 0; --d) {
        if (++idx[d] < x.shape()[d]) break;
        idx[d] = 0;
      }
    }
    // Per element, relative to that element: a small gradient cannot hide behind a large one.
    // Below kFloor an element is judged against kFloor (central differences carry ~1e-10 of
    // rounding noise, so a relative error below 1e-6 is not measurable for tinier gradients).
    for (size_t i = 0; i < numeric.size(); ++i)
      worst = std::max(worst, std::abs(numeric[i] - analytic[i]) / std::max(std::abs(numeric[i]), kFloor));
  }
  return worst;
}

}  // namespace zdl::testing

// Finite-difference gradient checking shared by all autograd tests.
//
// For f: inputs -> tensor, checks the analytic gradient of sum(f(x) * w) (w a fixed random
// weighting, so every output element matters) against central differences in f64:
//   d/dx_i ~ (L(x_i + h) - L(x_i - h)) / 2h,  h = 1e-6.
// Reports the worst relative error over every element of every input:
//   max_i |analytic_i - numeric_i| / max(|numeric_i|, 0.01)
// (per element, so small gradients are held to the same relative bound as large ones).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "autograd/ops.h"

namespace zdl::testing {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// Random f64 leaf of the given shape (values in [-1, 1)), requires_grad set.
inline Tensor rand_leaf(const Shape& shape, uint64_t seed, double low = -1.0, double high = 1.0) {
  Tensor t = Tensor::rand(shape, seed, DType::F64, Device::cpu(), 0, low, high);
  t.set_requires_grad(true);
  return t;
}

// A non-contiguous f64 leaf view: allocates `shape` transposed in its last two dims and
// returns the transpose (same values as a fresh tensor would have, strides swapped).
Tensor rand_noncontiguous_leaf(const Shape& shape, uint64_t seed);

// Returns the worst relative error over all inputs that require grad.
double gradcheck_error(const Fn& f, std::vector<Tensor> inputs, double h = 1e-6);

// Gtest assertion helper: EXPECT the error below tol and print it on failure.
inline void expect_gradcheck(const Fn& f, const std::vector<Tensor>& inputs, double tol = 1e-6) {
  double err = gradcheck_error(f, inputs);
  EXPECT_LT(err, tol) << "finite-difference gradient check failed: relative error " << err;
}

}  // namespace zdl::testing

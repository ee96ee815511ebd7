// relu, sigmoid, silu, abs, maximum, minimum, where, argmax: values against plain formulas,
// gradients against finite differences (f64), bf16 through the f32 detour.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "gradcheck.h"

namespace zdl {

using testing::expect_gradcheck;
using testing::rand_leaf;
using testing::rand_noncontiguous_leaf;

namespace {
Tensor vec(std::vector<double> v, const Shape& shape, DType dt = DType::F64) {
  return Tensor::from_vector(v, shape, dt);
}
double sigmoid_ref(double v) { return 1.0 / (1.0 + std::exp(-v)); }
}  // namespace

TEST(Activations, ValuesMatchTheirFormulas) {
  Tensor x = vec({-2.0, -0.5, 0.0, 0.5, 3.0}, {5}, DType::F64);
  auto check = [&](const Tensor& got, auto f, const char* name) {
    std::vector<double> v = got.to_vector(), in = x.to_vector();
    for (size_t i = 0; i < v.size(); ++i) EXPECT_DOUBLE_EQ(v[i], f(in[i])) << name << "(" << in[i] << ")";
  };
  check(relu(x), [](double v) { return v > 0 ? v : 0.0; }, "relu");
  check(sigmoid(x), sigmoid_ref, "sigmoid");
  check(silu(x), [](double v) { return v * sigmoid_ref(v); }, "silu");
  check(abs(x), [](double v) { return std::fabs(v); }, "abs");
  // bf16 goes through f32 and rounds once.
  Tensor xb = cast(x, DType::BF16);
  EXPECT_EQ(silu(xb).dtype(), DType::BF16);
  std::vector<double> sb = silu(xb).to_vector();
  for (size_t i = 0; i < sb.size(); ++i)
    EXPECT_NEAR(sb[i], x.to_vector()[i] * sigmoid_ref(x.to_vector()[i]), 0.02) << "bf16 silu";
}

TEST(Activations, GradientsMatchFiniteDifferences) {
  // Values in [-1, 1): kinks at 0 are at least ~1e-3 away with these seeds' draws.
  for (auto f : {relu, sigmoid, silu, abs}) {
    expect_gradcheck([f](const std::vector<Tensor>& x) { return f(x[0]); }, {rand_leaf({4, 6}, 11)});
    expect_gradcheck([f](const std::vector<Tensor>& x) { return f(x[0]); }, {rand_noncontiguous_leaf({5, 3}, 12)});
  }
  // Gradient 0 at the kink, as PyTorch.
  Tensor z = Tensor::zeros({3}, DType::F64);
  z.set_requires_grad(true);
  sum(add(relu(z), abs(z))).backward();
  EXPECT_EQ(z.grad().to_vector(), (std::vector<double>{0, 0, 0}));
}

TEST(MaximumMinimum, BroadcastValuesGradientsAndTies) {
  Tensor a = vec({1, 5, -2, 7}, {2, 2}, DType::F64), b = vec({3, -1}, {2}, DType::F64);
  EXPECT_EQ(maximum(a, b).to_vector(), (std::vector<double>{3, 5, 3, 7}));
  EXPECT_EQ(minimum(a, b).to_vector(), (std::vector<double>{1, -1, -2, -1}));
  for (auto f : {maximum, minimum}) {
    expect_gradcheck([f](const std::vector<Tensor>& x) { return f(x[0], x[1]); }, {rand_leaf({3, 4}, 21), rand_leaf({4}, 22)});
    expect_gradcheck([f](const std::vector<Tensor>& x) { return f(x[0], x[1]); },
                     {rand_noncontiguous_leaf({4, 3}, 23), rand_leaf({4, 1}, 24)});
  }
  // A tie splits the gradient; a NaN propagates.
  Tensor p = vec({2.0}, {1}, DType::F64), q = vec({2.0}, {1}, DType::F64);
  p.set_requires_grad(true);
  q.set_requires_grad(true);
  sum(maximum(p, q)).backward();
  EXPECT_EQ(p.grad().to_vector()[0], 0.5);
  EXPECT_EQ(q.grad().to_vector()[0], 0.5);
  Tensor nan = vec({std::nan(""), 1.0}, {2}, DType::F64);
  EXPECT_TRUE(std::isnan(maximum(nan, Tensor::zeros({2}, DType::F64)).to_vector()[0]));
  EXPECT_TRUE(std::isnan(minimum(Tensor::zeros({2}, DType::F64), nan).to_vector()[0]));
}

TEST(Where, SelectsBroadcastsAndKeepsTheOtherSideOut) {
  Tensor cond = vec({1, 0, 0, 1}, {2, 2}, DType::F64);
  Tensor a = vec({10, 20, 30, 40}, {2, 2}, DType::F64), b = vec({-1, -2}, {2}, DType::F64);
  EXPECT_EQ(where(cond, a, b).to_vector(), (std::vector<double>{10, -2, -1, 40}));
  EXPECT_EQ(where(cast(cond, DType::I64), a, b).to_vector(), (std::vector<double>{10, -2, -1, 40}));  // any cond dtype
  expect_gradcheck([cond](const std::vector<Tensor>& x) { return where(cond, x[0], x[1]); },
                   {rand_leaf({2, 2}, 31), rand_leaf({2}, 32)});
  // An Inf on the unselected side reaches neither the result nor a gradient (no Inf * 0).
  Tensor inf = vec({std::numeric_limits<double>::infinity(), 1.0}, {2}, DType::F64);
  inf.set_requires_grad(true);
  Tensor ok = vec({5.0, 6.0}, {2}, DType::F64);
  ok.set_requires_grad(true);
  Tensor pick = vec({0, 1}, {2}, DType::F64);
  Tensor y = where(pick, inf, ok);
  EXPECT_EQ(y.to_vector(), (std::vector<double>{5.0, 1.0}));
  sum(mul(y, 3.0)).backward();
  EXPECT_EQ(inf.grad().to_vector(), (std::vector<double>{0.0, 3.0}));
  EXPECT_EQ(ok.grad().to_vector(), (std::vector<double>{3.0, 0.0}));
}

TEST(Argmax, LastAndOtherDimsTiesNaNAndErrors) {
  Tensor x = vec({1, 9, 3, 9, 4, 2}, {2, 3}, DType::F32);
  EXPECT_EQ(argmax(x).to_vector(), (std::vector<double>{1, 0}));  // row 1: 9 first
  EXPECT_EQ(argmax(x, 0).to_vector(), (std::vector<double>{1, 0, 0}));
  EXPECT_EQ(argmax(x).dtype(), DType::I64);
  EXPECT_EQ(argmax(cast(x, DType::BF16)).to_vector(), (std::vector<double>{1, 0}));
  Tensor n = vec({1.0, std::nan(""), 5.0}, {3}, DType::F64);
  EXPECT_EQ(argmax(n).to_vector()[0], 1.0);
  EXPECT_THROW(argmax(x, 2), Error);
  EXPECT_THROW(argmax(Tensor::zeros({2, 0})), Error);
}

}  // namespace zdl

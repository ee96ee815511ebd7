// Views, layout ops and reductions: finite-difference gradients in f64 on odd sizes,
// including non-contiguous inputs, plus forward values and error messages.
#include <gtest/gtest.h>

#include <cstdint>

#include "autograd/node.h"
#include "gradcheck.h"

namespace zdl {

using testing::expect_gradcheck;
using testing::rand_leaf;
using testing::rand_noncontiguous_leaf;
using TL = std::vector<Tensor>;

TEST(Views, ReshapeTransposePermuteGradients) {
  expect_gradcheck([](const TL& x) { return mul(reshape(x[0], {5, -1}), 2.0); }, {rand_leaf({3, 5, 7}, 1)});
  expect_gradcheck([](const TL& x) { return mul(transpose(x[0], 0, 2), x[1]); },
                   {rand_leaf({3, 5, 7}, 2), rand_leaf({7, 5, 3}, 3)});
  expect_gradcheck([](const TL& x) { return square(permute(x[0], {2, 0, 1})); }, {rand_leaf({3, 5, 7}, 4)});
  expect_gradcheck([](const TL& x) { return square(reshape(x[0], {-1})); }, {rand_noncontiguous_leaf({3, 5, 7}, 5)});
  expect_gradcheck([](const TL& x) { return square(contiguous(x[0])); }, {rand_noncontiguous_leaf({4, 3}, 6)});
  expect_gradcheck([](const TL& x) { return squeeze(unsqueeze(square(x[0]), 1), 1); }, {rand_leaf({3, 5}, 7)});
  expect_gradcheck([](const TL& x) { return mul(expand(x[0], {4, 3, 5}), x[1]); },
                   {rand_leaf({3, 1}, 8), rand_leaf({4, 3, 5}, 9)});
}

TEST(Views, SliceSplitCatGradients) {
  expect_gradcheck([](const TL& x) { return square(slice(x[0], 1, 1, 6, 2)); }, {rand_leaf({3, 7, 2}, 10)});
  expect_gradcheck([](const TL& x) { return square(slice(x[0], -1, -3, 5)); }, {rand_noncontiguous_leaf({3, 5}, 11)});
  expect_gradcheck(
      [](const TL& x) {
        auto parts = split(x[0], {2, 3, 2}, 1);
        return cat({mul(parts[2], parts[0]), square(parts[1])}, 1);
      },
      {rand_leaf({3, 7}, 12)});
  // A part that gets no gradient: its slice of the input's gradient is zero.
  expect_gradcheck(
      [](const TL& x) {
        auto parts = split(x[0], 2, 1);
        return mul(parts[0], parts[2]);
      },
      {rand_leaf({3, 6}, 15)});
  expect_gradcheck([](const TL& x) { return cat({x[0], x[1], x[0]}, 0); },
                   {rand_noncontiguous_leaf({2, 3}, 13), rand_leaf({4, 3}, 14)});
}

// split's backward takes its input's gradient as it is when the parts' gradients are adjacent
// slices of one buffer (as cuDNN's attention backward writes dq, dk, dv), and copies otherwise.
TEST(Views, SplitBackwardReusesAdjacentGradients) {
  Tensor x = Tensor::randn({2, 3, 12}, 16);
  x.set_requires_grad(true);
  std::vector<Tensor> parts = split(x, 4, 2);
  ASSERT_TRUE(parts[0].grad_fn());
  Tensor buf = Tensor::randn({2, 3, 12}, 17);
  autograd::TensorList side_by_side = {slice(buf, 2, 0, 4), slice(buf, 2, 4, 8), slice(buf, 2, 8, 12)};
  autograd::TensorList gi = parts[0].grad_fn()->apply(side_by_side);
  ASSERT_EQ(gi.size(), 1u);
  EXPECT_TRUE(gi[0].storage() == buf.storage());
  EXPECT_EQ(gi[0].offset(), 0);
  EXPECT_EQ(gi[0].shape(), x.shape());
  EXPECT_EQ(gi[0].to_vector(), buf.to_vector());
  // Out of order: the parts are copied into a new buffer in the input's order.
  autograd::TensorList swapped = {slice(buf, 2, 4, 8), slice(buf, 2, 0, 4), slice(buf, 2, 8, 12)};
  gi = parts[0].grad_fn()->apply(swapped);
  EXPECT_FALSE(gi[0].storage() == buf.storage());
  EXPECT_EQ(gi[0].to_vector(), cat({swapped[0], swapped[1], swapped[2]}, 2).to_vector());
  // Through the engine: split then cat, whose backward hands split adjacent slices.
  Tensor w = Tensor::randn({2, 3, 12}, 18);
  sum(mul(cat(parts, 2), w)).backward();
  EXPECT_EQ(x.grad().to_vector(), w.to_vector());
}

TEST(Views, ShareStorageAndComputeRightValues) {
  Tensor a = Tensor::from_vector(std::vector<double>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4});
  Tensor s = slice(a, 1, 1, 4, 2);
  EXPECT_EQ(s.shape(), (Shape{3, 2}));
  EXPECT_EQ(s.storage(), a.storage());
  EXPECT_EQ(s.to_vector(), (std::vector<double>{1, 3, 5, 7, 9, 11}));
  auto parts = split(a, 3, 1);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[1].shape(), (Shape{3, 1}));
  EXPECT_EQ(parts[1].to_vector(), (std::vector<double>{3, 7, 11}));
  // One node for the parts: the input's gradient is assembled in one buffer.
  Tensor leaf = Tensor::zeros({3, 4}, DType::F64);
  leaf.set_requires_grad(true);
  auto thirds = split(leaf, {1, 2, 1}, 1);
  ASSERT_NE(thirds[0].grad_fn(), nullptr);
  EXPECT_EQ(thirds[0].grad_fn(), thirds[2].grad_fn());
  EXPECT_EQ(thirds[1].grad_fn()->name(), "split");
  Tensor c = cat({a, a}, 0);
  EXPECT_EQ(c.shape(), (Shape{6, 4}));
  EXPECT_EQ(reshape(transpose(a, 0, 1), {12}).to_vector(),
            (std::vector<double>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
}

// reshape is a view wherever the strides allow, as in PyTorch: the q, k, v thirds of a fused
// [B, T, 3C] projection split into heads without a copy (what the GPU's attention reads), while a
// layout that cannot be seen in the new shape is copied. Every case against the copy's values.
TEST(Views, ReshapeIsAViewWhereverTheStridesAllow) {
  const int64_t B = 2, T = 3, NH = 2, HS = 4, C = NH * HS;
  Tensor qkv = Tensor::randn({B, T, 3 * C}, 50, DType::F64);
  auto expect_view = [](const Tensor& got, const Tensor& from, const Shape& strides, const std::string& what) {
    EXPECT_EQ(got.storage(), from.storage()) << what << ": copied";
    ASSERT_EQ(got.strides().size(), strides.size()) << what;
    for (size_t d = 0; d < strides.size(); ++d)  // a size-1 dimension's stride is never used
      if (got.size(static_cast<int64_t>(d)) > 1) EXPECT_EQ(got.strides()[d], strides[d]) << what << ", dimension " << d;
    EXPECT_EQ(got.to_vector(), reshape(contiguous(from), got.shape()).to_vector()) << what;
  };
  for (int part = 0; part < 3; ++part) {
    Tensor third = split(qkv, C, 2)[static_cast<size_t>(part)];  // [B, T, C], strides {3TC, 3C, 1}
    Tensor heads = reshape(third, {B, T, NH, HS});
    expect_view(heads, third, {T * 3 * C, 3 * C, HS, 1}, "q/k/v " + std::to_string(part) + " into heads");
    EXPECT_EQ(transpose(heads, 1, 2).strides(), (Shape{T * 3 * C, HS, 3 * C, 1}));
    expect_view(view(third, {B * T, C}), third, {3 * C, 1}, "B and T merged, C kept");
  }
  Tensor t = transpose(Tensor::randn({4, 6}, 51, DType::F64), 0, 1);  // [6, 4], strides {1, 6}
  expect_view(reshape(t, {2, 3, 4}), t, {3, 1, 6}, "a transposed dimension split");
  expect_view(reshape(t, {6, 1, 4, 1}), t, {1, 1, 6, 1}, "size-1 dimensions added");
  expect_view(reshape(unsqueeze(t, 1), {6, 4}), t, {1, 6}, "a size-1 dimension dropped");
  // Merging the heads back ([B, NH, T, HS] -> [B, T, C] after a transpose) cannot be a view.
  Tensor y = transpose(Tensor::randn({B, NH, T, HS}, 52, DType::F64), 1, 2);
  Tensor merged = reshape(y, {B, T, C});
  EXPECT_NE(merged.storage(), y.storage());
  EXPECT_TRUE(merged.is_contiguous());
  EXPECT_EQ(merged.to_vector(), contiguous(y).to_vector());
  // The gradient of the fused projection through the views.
  expect_gradcheck(
      [&](const TL& x) {
        auto parts = split(x[0], C, 2);
        auto h = [&](const Tensor& p) { return transpose(reshape(p, {B, T, NH, HS}), 1, 2); };
        return mul(mul(h(parts[0]), h(parts[1])), h(parts[2]));
      },
      {rand_leaf({B, T, 3 * C}, 53)});
}

TEST(Views, ErrorsNameShapes) {
  Tensor a = Tensor::zeros({3, 4});
  auto expect_msg = [](auto fn, const std::string& needle) {
    try {
      fn();
      FAIL() << "expected an error containing " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_msg([&] { reshape(a, {5, 3}); }, "[3,4]");
  expect_msg([&] { view(transpose(a, 0, 1), {12}); }, "cannot be seen as shape=[12] without a copy");
  expect_msg([&] { cat({a, Tensor::zeros({3, 5})}, 0); }, "[3,5]");
  expect_msg([&] { split(a, {1, 2}, 1); }, "[1,2]");
  expect_msg([&] { permute(a, {0, 0}); }, "repeated");
  expect_msg([&] { transpose(a, 0, 2); }, "out of range");
  // The op the user called is the one named (view said "reshape: cannot reshape").
  expect_msg([&] { view(a, {5, 3}); }, "view: cannot make shape=[3,4] (12 elements) into [5,3]");
  expect_msg([&] { view(a, {-1, 5}); }, "view: cannot make shape=[3,4]");
  expect_msg([&] { reshape(a, {INT64_MAX, 4, -1}); }, "more elements than 64 bits count");
  // A huge step overflowed the size formula (a negative size, then a bad view).
  Tensor r = Tensor::arange(6, DType::F64);
  EXPECT_EQ(slice(r, 0, 1, 6, INT64_MAX).to_vector(), std::vector<double>{1});
  EXPECT_EQ(slice(r, 0, 1, INT64_MAX, 2).to_vector(), (std::vector<double>{1, 3, 5}));
}

TEST(Reduce, SumMeanGradientsOverAnyDims) {
  expect_gradcheck([](const TL& x) { return sum(x[0]); }, {rand_leaf({3, 5, 7}, 20)});
  expect_gradcheck([](const TL& x) { return sum(x[0], {0}); }, {rand_leaf({3, 5, 7}, 21)});
  expect_gradcheck([](const TL& x) { return sum(x[0], {-1}, true); }, {rand_leaf({3, 5, 7}, 22)});
  expect_gradcheck([](const TL& x) { return sum(x[0], {0, 2}); }, {rand_leaf({3, 5, 7}, 23)});
  expect_gradcheck([](const TL& x) { return mean(x[0], {1}); }, {rand_noncontiguous_leaf({3, 5, 7}, 24)});
  expect_gradcheck([](const TL& x) { return mean(x[0]); }, {rand_noncontiguous_leaf({5, 3}, 25)});
}

TEST(Reduce, ValuesMatchPlainLoops) {
  Tensor x = Tensor::randn({3, 5, 7}, 30, DType::F64);
  auto v = x.to_vector();
  auto s = sum(x, {0, 2}).to_vector();
  for (int j = 0; j < 5; ++j) {
    double ref = 0;
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k < 7; ++k) ref += v[(i * 5 + j) * 7 + k];
    EXPECT_NEAR(s[j], ref, 1e-12);
  }
  // Large column sum (the bias-gradient shape) in f32 stays accurate.
  Tensor big = Tensor::full({4097, 3}, 0.1, DType::F32);
  for (double c : sum(big, {0}).to_vector()) EXPECT_NEAR(c, 409.7, 1e-3);
}

TEST(Elementwise, AllOpsGradients) {
  expect_gradcheck([](const TL& x) { return exp(x[0]); }, {rand_leaf({3, 5}, 40)});
  expect_gradcheck([](const TL& x) { return log(x[0]); }, {rand_leaf({3, 5}, 41, 0.5, 2.0)});
  expect_gradcheck([](const TL& x) { return sqrt(x[0]); }, {rand_leaf({3, 5}, 42, 0.5, 2.0)});
  expect_gradcheck([](const TL& x) { return tanh(x[0]); }, {rand_noncontiguous_leaf({3, 5}, 43)});
  expect_gradcheck([](const TL& x) { return 3.0 - 2.0 / (x[0] + 3.0); }, {rand_leaf({7}, 44)});
  expect_gradcheck([](const TL& x) { return -x[0] * 0.5 + x[1] / x[0]; },
                   {rand_leaf({5}, 45, 1.0, 2.0), rand_leaf({3, 5}, 46)});
  expect_gradcheck([](const TL& x) { return mul(x[0], x[0]); }, {rand_leaf({2, 3}, 47)});  // same input twice
}

TEST(Elementwise, ErrorsNameBothSides) {
  Tensor a = Tensor::zeros({3, 4}), b = Tensor::zeros({5, 4});
  try {
    add(a, b);
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("[3,4]"), std::string::npos) << m;
    EXPECT_NE(m.find("[5,4]"), std::string::npos) << m;
  }
  try {
    add(a, Tensor::zeros({3, 4}, DType::F64));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("f32 vs f64"), std::string::npos) << e.what();
  }
  EXPECT_THROW(add(a, Tensor::zeros({3, 4}, DType::I64)), Error);
  EXPECT_THROW(add(a, Tensor()), Error);
}

}  // namespace zdl

#include <gtest/gtest.h>

#include "gradcheck.h"

namespace zdl {

using testing::expect_gradcheck;
using testing::rand_leaf;
using testing::rand_noncontiguous_leaf;

TEST(Elementwise, BroadcastingGradients) {
  expect_gradcheck([](const std::vector<Tensor>& x) { return div(mul(add(x[0], x[1]), sub(x[0], x[1])), add(x[2], 3.0)); },
                   {rand_leaf({3, 5, 7}, 1), rand_leaf({5, 1}, 2), rand_leaf({7}, 3)});
}

TEST(Elementwise, NonContiguousInputsGradients) {
  // Transposed views in both operands, and broadcast against one.
  expect_gradcheck([](const std::vector<Tensor>& x) { return div(mul(add(x[0], x[1]), sub(x[0], x[1])), add(x[2], 3.0)); },
                   {rand_noncontiguous_leaf({4, 6}, 4), rand_noncontiguous_leaf({4, 6}, 5), rand_leaf({6}, 6)});
  expect_gradcheck([](const std::vector<Tensor>& x) { return mul(sub(x[0], x[1]), x[0]); },
                   {rand_noncontiguous_leaf({3, 5, 7}, 7), rand_leaf({5, 1}, 8)});
}

TEST(Elementwise, CastPassesTheGradientBackInTheInputsDtype) {
  // f64 -> f32 (and -> bf16): the gradient comes back as f64 holding the upstream values
  // (finite differences cannot see through the rounding of a narrower dtype, so exactly).
  Tensor x = rand_leaf({3, 4}, 9);
  for (DType narrow : {DType::F32, DType::BF16}) {
    x.set_grad(Tensor());
    Tensor w = Tensor::rand({3, 4}, 10, narrow, Device::cpu(), 0, -1.0, 1.0);
    Tensor y = cast(x, narrow);
    EXPECT_EQ(y.dtype(), narrow);
    sum(mul(y, w)).backward();
    ASSERT_TRUE(x.grad().defined());
    EXPECT_EQ(x.grad().dtype(), DType::F64);
    EXPECT_EQ(x.grad().to_vector(), w.to_vector()) << dtype_name(narrow);
  }
}

}  // namespace zdl

#include <gtest/gtest.h>

#include "gradcheck.h"

namespace zdl {

using testing::expect_gradcheck;
using testing::rand_leaf;

TEST(Elementwise, BroadcastingGradients) {
  expect_gradcheck([](const std::vector<Tensor>& x) { return div(mul(add(x[0], x[1]), sub(x[0], x[1])), add(x[2], 3.0)); },
                   {rand_leaf({3, 5, 7}, 1), rand_leaf({5, 1}, 2), rand_leaf({7}, 3)});
}

}  // namespace zdl

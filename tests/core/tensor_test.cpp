#include <gtest/gtest.h>

#include "autograd/ops.h"
#include "core/tensor.h"

namespace zdl {

TEST(Tensor, FactoriesAndViews) {
  Tensor t = Tensor::from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_TRUE(t.is_contiguous());
  Tensor tt = transpose(t, 0, 1);
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_EQ(tt.to_vector(), (std::vector<double>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(tt.storage(), t.storage());
}

}  // namespace zdl

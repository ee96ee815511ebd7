#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/tensor.h"

namespace zdl {

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(BFloat16(1.0f).bits, 0x3f80);
  EXPECT_EQ(static_cast<float>(BFloat16(3.140625f)), 3.140625f);  // exactly representable
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even -> 1.
  EXPECT_EQ(static_cast<float>(BFloat16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  // 1 + 3*2^-8 is halfway between 1+2^-7 and 1+2^-6: ties to even -> 1 + 2^-6.
  EXPECT_EQ(static_cast<float>(BFloat16(1.0f + 3 * std::ldexp(1.0f, -8))), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(static_cast<float>(BFloat16(std::numeric_limits<float>::infinity()))));
}

TEST(DType, HalfRoundTrip) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 0.1f}) {
    float back = static_cast<float>(Half(f));
    EXPECT_NEAR(back, f, std::abs(f) * 1e-3 + 1e-8) << f;
  }
  EXPECT_TRUE(std::isinf(static_cast<float>(Half(1e6f))));
}

TEST(DType, CopyConvertsBetweenAllTypes) {
  Tensor src = Tensor::from_vector(std::vector<double>{-3, 0, 1, 7, 100}, {5}, DType::F64);
  for (DType t : {DType::F32, DType::F64, DType::BF16, DType::F16, DType::I32, DType::I64}) {
    Tensor c = src.to(t);
    EXPECT_EQ(c.dtype(), t);
    EXPECT_EQ(c.to_vector(), src.to_vector()) << dtype_name(t);
  }
}

TEST(DType, ParsesNamesAndRejectsUnknown) {
  EXPECT_EQ(dtype_from_name("bf16"), DType::BF16);
  EXPECT_EQ(dtype_from_name("float32"), DType::F32);
  EXPECT_THROW(dtype_from_name("f8"), Error);
  EXPECT_EQ(device_from_name("cuda:1"), Device::cuda(1));
  EXPECT_THROW(device_from_name("gpu"), Error);
}

TEST(DType, DataAccessorChecksDtype) {
  Tensor t = Tensor::zeros({3}, DType::F32).set_name("x");
  EXPECT_NO_THROW(t.data<float>());
  try {
    t.data<double>();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("f32"), std::string::npos) << e.what();
  }
}

}  // namespace zdl

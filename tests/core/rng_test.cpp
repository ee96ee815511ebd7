// Philox4x32-10 against the published known-answer vectors (Random123's kat_vectors), and the
// property ZeRO-3 init relies on: any slice of a random tensor can be generated alone.
#include <gtest/gtest.h>

#include <cmath>

#include "core/rng.h"
#include "core/tensor.h"

namespace zdl {

TEST(Philox, KnownAnswerVectors) {
  // counter = {0,0,0,0}, key = {0,0}
  auto z = Philox::block(0, 0, 0);
  EXPECT_EQ(z[0], 0x6627e8d5u);
  EXPECT_EQ(z[1], 0xe169c58du);
  EXPECT_EQ(z[2], 0xbc57ac4cu);
  EXPECT_EQ(z[3], 0x9b00dbd8u);
  // counter = {ffffffff x4}, key = {ffffffff x2}
  auto f = Philox::block(~0ull, ~0ull, ~0ull);
  EXPECT_EQ(f[0], 0x408f276du);
  EXPECT_EQ(f[1], 0x41c83b0eu);
  EXPECT_EQ(f[2], 0xa20bc7c6u);
  EXPECT_EQ(f[3], 0x6d5451fdu);
  // counter = {243f6a88, 85a308d3, 13198a2e, 03707344}, key = {a4093822, 299f31d0}
  auto p = Philox::block(0x299f31d0a4093822ull, 0x0370734413198a2eull, 0x85a308d3243f6a88ull);
  EXPECT_EQ(p[0], 0xd16cfe09u);
  EXPECT_EQ(p[1], 0x94fdccebu);
  EXPECT_EQ(p[2], 0x5001e420u);
  EXPECT_EQ(p[3], 0x24126ea1u);
}

TEST(Philox, AnyElementIsGeneratedIndependently) {
  Tensor full = Tensor::randn({1000}, 42, DType::F32, Device::cpu(), /*stream=*/7);
  auto v = full.to_vector();
  Philox gen(42, 7);
  for (uint64_t i : {0ull, 1ull, 499ull, 999ull}) EXPECT_EQ(static_cast<float>(v[i]), gen.normal(i));
}

TEST(Philox, NormalAndUniformMoments) {
  const int n = 200000;
  Philox gen(3, 1);
  double s = 0, s2 = 0, u = 0;
  for (int i = 0; i < n; ++i) {
    double z = gen.normal(i);
    s += z;
    s2 += z * z;
    double x = gen.uniform(i);
    ASSERT_GE(x, 0.0);
    ASSERT_LT(x, 1.0);
    u += x;
  }
  EXPECT_NEAR(s / n, 0.0, 0.01);
  EXPECT_NEAR(s2 / n, 1.0, 0.02);
  EXPECT_NEAR(u / n, 0.5, 0.005);
  // Different streams give different numbers.
  EXPECT_NE(Philox(3, 1).normal(0), Philox(3, 2).normal(0));
}

}  // namespace zdl

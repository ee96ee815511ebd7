// Block-wise int8 quantization (kernels/cpu/quantize.h): hand-worked values, the error bound
// against a double-precision oracle, all-zero blocks, short last blocks, bf16, and the same
// bytes on any thread count.
#include <omp.h>

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "core/rng.h"
#include "kernels/cpu/quantize.h"

namespace zdl::kernels::cpu {
namespace {

std::vector<float> random_values(int64_t n, uint64_t seed) {
  Philox g(seed, 0);
  std::vector<float> x(static_cast<size_t>(n));
  // Magnitudes spread over 2^-8..2^8, so blocks differ in scale by orders of magnitude.
  for (int64_t i = 0; i < n; ++i) {
    const double u = g.uniform(static_cast<uint64_t>(2 * i)), v = g.uniform(static_cast<uint64_t>(2 * i + 1));
    x[static_cast<size_t>(i)] = static_cast<float>((2 * u - 1) * std::ldexp(1.0, static_cast<int>(16 * v) - 8));
  }
  return x;
}

TEST(Quantize, HandWorkedBlock) {
  // max |x| = 127: scale 1; -63.5 rounds to even (-64); 0.4 to 0.
  const std::vector<float> x = {127.0f, -63.5f, 0.4f, -127.0f};
  std::vector<int8_t> q(4);
  float scale = 0;
  quantize_int8(DType::F32, 4, x.data(), 256, q.data(), &scale);
  EXPECT_EQ(scale, 1.0f);
  EXPECT_EQ(q, (std::vector<int8_t>{127, -64, 0, -127}));
  std::vector<float> back(4);
  dequantize_int8(DType::F32, 4, q.data(), &scale, 256, back.data());
  EXPECT_EQ(back, (std::vector<float>{127.0f, -64.0f, 0.0f, -127.0f}));
}

TEST(Quantize, EveryValueIsWithinItsBlocksBound) {
  for (int64_t n : {int64_t{1}, int64_t{255}, int64_t{256}, int64_t{1000}, int64_t{4097}}) {
    const std::vector<float> x = random_values(n, static_cast<uint64_t>(n));
    const int64_t nb = quantized_blocks(n);
    std::vector<int8_t> q(static_cast<size_t>(n));
    std::vector<float> scales(static_cast<size_t>(nb)), back(static_cast<size_t>(n));
    quantize_int8(DType::F32, n, x.data(), kQuantBlock, q.data(), scales.data());
    dequantize_int8(DType::F32, n, q.data(), scales.data(), kQuantBlock, back.data());
    for (int64_t b = 0; b < nb; ++b) {
      double amax = 0;
      for (int64_t i = b * kQuantBlock; i < std::min(n, (b + 1) * kQuantBlock); ++i)
        amax = std::max(amax, std::fabs(double(x[static_cast<size_t>(i)])));
      EXPECT_FLOAT_EQ(scales[static_cast<size_t>(b)], static_cast<float>(amax / 127)) << "n " << n << " block " << b;
      for (int64_t i = b * kQuantBlock; i < std::min(n, (b + 1) * kQuantBlock); ++i) {
        const size_t k = static_cast<size_t>(i);
        EXPECT_LE(std::abs(int(q[k])), 127);
        // scale / 2, and a few float roundings of the division and the product
        EXPECT_LE(std::fabs(double(back[k]) - double(x[k])), amax / 254 * (1 + 1e-5)) << "n " << n << " i " << i;
      }
    }
  }
}

TEST(Quantize, AllZeroBlockHasScaleZero) {
  std::vector<float> x(300, 0.0f);
  x[299] = 2.0f;  // the second block (44 values) is not all zero
  std::vector<int8_t> q(300, 5);
  std::vector<float> scales(2, -1), back(300, -1);
  quantize_int8(DType::F32, 300, x.data(), 256, q.data(), scales.data());
  EXPECT_EQ(scales[0], 0.0f);
  EXPECT_EQ(q[0], 0);
  EXPECT_EQ(q[299], 127);
  dequantize_int8(DType::F32, 300, q.data(), scales.data(), 256, back.data());
  EXPECT_EQ(back[0], 0.0f);
  EXPECT_EQ(back[299], 2.0f);
}

TEST(Quantize, Bf16RoundTripsThroughTheSameCodes) {
  const int64_t n = 700;
  const std::vector<float> xf = random_values(n, 3);
  std::vector<BFloat16> xb;
  std::vector<float> xbf;  // the bf16 values, widened
  for (float v : xf) {
    xb.push_back(BFloat16(v));
    xbf.push_back(static_cast<float>(xb.back()));
  }
  const int64_t nb = quantized_blocks(n);
  std::vector<int8_t> qb(n), qf(n);
  std::vector<float> sb(nb), sf(nb);
  quantize_int8(DType::BF16, n, xb.data(), kQuantBlock, qb.data(), sb.data());
  quantize_int8(DType::F32, n, xbf.data(), kQuantBlock, qf.data(), sf.data());
  EXPECT_EQ(qb, qf);  // bf16 is quantized as its f32 value
  EXPECT_EQ(sb, sf);
  std::vector<BFloat16> back(n);
  dequantize_int8(DType::BF16, n, qb.data(), sb.data(), kQuantBlock, back.data());
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(static_cast<float>(back[i]), static_cast<float>(BFloat16(float(qb[i]) * sb[i / kQuantBlock])));
}

TEST(Quantize, SameBytesOnAnyThreadCount) {
  const int64_t n = 1 << 18;  // enough blocks to run in parallel
  const std::vector<float> x = random_values(n, 9);
  const int64_t nb = quantized_blocks(n);
  std::vector<int8_t> q1(n), q4(n);
  std::vector<float> s1(nb), s4(nb);
  const int before = omp_get_max_threads();
  omp_set_num_threads(1);
  quantize_int8(DType::F32, n, x.data(), kQuantBlock, q1.data(), s1.data());
  omp_set_num_threads(4);
  quantize_int8(DType::F32, n, x.data(), kQuantBlock, q4.data(), s4.data());
  omp_set_num_threads(before);
  EXPECT_EQ(q1, q4);
  EXPECT_EQ(s1, s4);
}

}  // namespace
}  // namespace zdl::kernels::cpu

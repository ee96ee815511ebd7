// zerodl's AVX2 GEMM: each element is one FMA chain over k from C's value (or zero), so its
// bits do not depend on which block of C a call computes. Checked against the plain twin in
// tests/autograd/matmul_test.cpp (F32BackendsMatchReference); here, the claims of its own.
#include <cmath>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/gemm_avx2.h"

namespace zdl::kernels::cpu {
namespace {

std::vector<float> wave(size_t n, double f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(std::sin(f * static_cast<double>(i) + 0.1));
  return v;
}

TEST(GemmAvx2, AnySubBlockHasTheFullProductsBits) {
  if (!gemm_avx2_supported()) GTEST_SKIP() << "CPU without AVX2 and FMA";
  // Past every cache block (K > 384, M > 96), with partial register blocks (M, N not multiples
  // of 6 and 16), for every transpose; a sub-block at an odd offset, as a tile would be.
  const int64_t M = 203, N = 77, K = 900, m0 = 31, n0 = 9, mm = 101, nn = 45;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool acc : {false, true}) {
        const int64_t lda = ta ? M : K, ldb = tb ? K : N;
        const std::vector<float> a = wave(static_cast<size_t>(M * K), 0.37), b = wave(static_cast<size_t>(K * N), 0.11);
        const std::vector<float> c0 = wave(static_cast<size_t>(M * N), 0.7);
        std::vector<float> full = c0, part = c0;
        gemm_avx2(M, N, K, ta, a.data(), lda, tb, b.data(), ldb, full.data(), N, acc);
        const float* at = ta ? a.data() + m0 : a.data() + m0 * lda;
        const float* bt = tb ? b.data() + n0 * ldb : b.data() + n0;
        gemm_avx2(mm, nn, K, ta, at, lda, tb, bt, ldb, part.data() + m0 * N + n0, N, acc);
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < N; ++n) {
            const bool inside = m >= m0 && m < m0 + mm && n >= n0 && n < n0 + nn;
            const float want = inside ? full[m * N + n] : c0[m * N + n];
            ASSERT_EQ(std::memcmp(&part[m * N + n], &want, sizeof(float)), 0)
                << "ta=" << ta << " tb=" << tb << " acc=" << acc << " at (" << m << ", " << n << "): " << part[m * N + n]
                << " vs " << want << (inside ? " (the full product's)" : " (outside the block: must be untouched)");
          }
      }
}

TEST(GemmAvx2, EachElementIsOneFmaChainInKOrder) {
  if (!gemm_avx2_supported()) GTEST_SKIP() << "CPU without AVX2 and FMA";
  // The rounding contract, element by element: c = fma(a_k, b_k, c) for k = 0 .. K-1, from C's
  // value when accumulating and from zero otherwise (C's NaN must then not leak).
  const int64_t M = 7, N = 19, K = 1000;
  const std::vector<float> a = wave(static_cast<size_t>(M * K), 1.3), b = wave(static_cast<size_t>(K * N), 0.9);
  for (bool acc : {false, true}) {
    std::vector<float> c(static_cast<size_t>(M * N), acc ? 0.25f : std::nanf(""));
    gemm_avx2(M, N, K, false, a.data(), K, false, b.data(), N, c.data(), N, acc);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        float want = acc ? 0.25f : 0.0f;
        for (int64_t k = 0; k < K; ++k) want = std::fma(a[m * K + k], b[k * N + n], want);
        ASSERT_EQ(std::memcmp(&c[m * N + n], &want, sizeof(float)), 0)
            << "acc=" << acc << " at (" << m << ", " << n << "): " << c[m * N + n] << " vs " << want;
      }
  }
}

TEST(GemmAvx2, EmptyInnerDimension) {
  if (!gemm_avx2_supported()) GTEST_SKIP() << "CPU without AVX2 and FMA";
  std::vector<float> c(6, std::nanf(""));
  gemm_avx2(2, 3, 0, false, nullptr, 1, false, nullptr, 3, c.data(), 3, false);
  for (float v : c) EXPECT_EQ(v, 0.0f);
  std::vector<float> d(6, 1.5f);
  gemm_avx2(2, 3, 0, false, nullptr, 1, false, nullptr, 3, d.data(), 3, true);
  for (float v : d) EXPECT_EQ(v, 1.5f);
}

}  // namespace
}  // namespace zdl::kernels::cpu

// zerodl's AVX2 GEMM: each element's rounding depends on K alone (its K blocks' FMA chains, added
// in order, then onto C when accumulating), so its bits do not depend on which block of C a call
// computes. Checked against the plain twin in
// tests/autograd/matmul_test.cpp (F32BackendsMatchReference); here, the claims of its own.
#include <algorithm>
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

TEST(GemmAvx2, EachElementIsItsKBlocksFmaChainsInOrder) {
  if (!gemm_avx2_supported()) GTEST_SKIP() << "CPU without AVX2 and FMA";
  // The rounding contract, element by element: P = the blocks of 384 values of k, each summed
  // as c = fma(a_k, b_k, c) from zero, added in order; C = P, or C + P when accumulating (C's
  // NaN must not leak without it).
  const int64_t M = 7, N = 19, K = 1000, block = 384;
  const std::vector<float> a = wave(static_cast<size_t>(M * K), 1.3), b = wave(static_cast<size_t>(K * N), 0.9);
  for (bool acc : {false, true}) {
    std::vector<float> c(static_cast<size_t>(M * N), acc ? 0.25f : std::nanf(""));
    gemm_avx2(M, N, K, false, a.data(), K, false, b.data(), N, c.data(), N, acc);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        float p = 0.0f;
        for (int64_t k0 = 0; k0 < K; k0 += block) {
          float s = 0.0f;
          for (int64_t k = k0; k < std::min(K, k0 + block); ++k) s = std::fma(a[m * K + k], b[k * N + n], s);
          p = k0 == 0 ? s : p + s;
        }
        const float want = acc ? 0.25f + p : p;
        ASSERT_EQ(std::memcmp(&c[m * N + n], &want, sizeof(float)), 0)
            << "acc=" << acc << " at (" << m << ", " << n << "): " << c[m * N + n] << " vs " << want;
      }
  }
}

TEST(GemmAvx2, AccumulatingAddsTheProductComputedAlone) {
  if (!gemm_avx2_supported()) GTEST_SKIP() << "CPU without AVX2 and FMA";
  // Gradient accumulation over micro-batches (C += dW of the next one) must give the bits of
  // the two products computed alone and added, as the ranks' reduction adds them: within one K
  // block and across several.
  for (int64_t K : {100, 900}) {
    const int64_t M = 29, N = 37;
    const std::vector<float> a = wave(static_cast<size_t>(M * K), 0.21), b = wave(static_cast<size_t>(K * N), 0.53);
    const std::vector<float> c0 = wave(static_cast<size_t>(M * N), 0.05);
    std::vector<float> accumulated = c0, alone(c0.size());
    gemm_avx2(M, N, K, true, a.data(), M, false, b.data(), N, accumulated.data(), N, /*accumulate=*/true);
    gemm_avx2(M, N, K, true, a.data(), M, false, b.data(), N, alone.data(), N, /*accumulate=*/false);
    for (size_t i = 0; i < c0.size(); ++i) {
      const float want = c0[i] + alone[i];
      ASSERT_EQ(std::memcmp(&accumulated[i], &want, sizeof(float)), 0)
          << "K=" << K << " at " << i << ": " << accumulated[i] << " vs " << c0[i] << " + " << alone[i];
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

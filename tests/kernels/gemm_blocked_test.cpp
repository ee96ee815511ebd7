// zerodl's blocked GEMM: each element's rounding depends on K alone (its K blocks' FMA chains,
// added in order, then onto C when accumulating), so its bits do not depend on which block of C
// a call computes, nor on the instance's vector width. Checked against the plain twin in
// tests/autograd/matmul_test.cpp (F32BackendsMatchReference); here, the claims of its own, for
// every instance this CPU runs. The AVX-512 instance's 12 x 32 block is also run here on AVX2
// registers (the same body, four ymm for each zmm), so its packing and edges are checked on any
// CPU with AVX2, not only where AVX-512 is.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/gemm_blocked.h"

#if defined(__x86_64__) || defined(__i386__)
#define ZDL_GEMM_TARGET __attribute__((target("avx2,fma")))
#include "kernels/cpu/gemm_blocked_impl.h"
#undef ZDL_GEMM_TARGET
#define ZDL_TEST_WIDE_BLOCK 1
#else
#define ZDL_TEST_WIDE_BLOCK 0
#endif

namespace zdl::kernels::cpu {
namespace {

std::vector<float> wave(size_t n, double f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(std::sin(f * static_cast<double>(i) + 0.1));
  return v;
}

std::vector<GemmIsa> isas_here() {
  std::vector<GemmIsa> out;
  for (GemmIsa isa : {GemmIsa::Avx2, GemmIsa::Avx512})
    if (gemm_blocked_supported(isa)) out.push_back(isa);
  return out;
}

std::string name(GemmIsa isa) { return isa == GemmIsa::Avx512 ? "avx512" : "avx2"; }

bool same_bits(float x, float y) { return std::memcmp(&x, &y, sizeof(float)) == 0; }

TEST(GemmBlocked, AnySubBlockHasTheFullProductsBits) {
  if (isas_here().empty()) GTEST_SKIP() << "CPU without AVX2 and FMA";
  // Past every cache block (K > 384, M > 96), with partial register blocks (M, N not multiples
  // of 6, 12, 16 or 32), for every transpose; a sub-block at an odd offset, as a tile would be.
  const int64_t M = 203, N = 77, K = 900, m0 = 31, n0 = 9, mm = 101, nn = 45;
  for (GemmIsa isa : isas_here())
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (bool acc : {false, true}) {
          const int64_t lda = ta ? M : K, ldb = tb ? K : N;
          const std::vector<float> a = wave(static_cast<size_t>(M * K), 0.37), b = wave(static_cast<size_t>(K * N), 0.11);
          const std::vector<float> c0 = wave(static_cast<size_t>(M * N), 0.7);
          std::vector<float> full = c0, part = c0;
          gemm_blocked(isa, M, N, K, ta, a.data(), lda, tb, b.data(), ldb, full.data(), N, acc);
          const float* at = ta ? a.data() + m0 : a.data() + m0 * lda;
          const float* bt = tb ? b.data() + n0 * ldb : b.data() + n0;
          gemm_blocked(isa, mm, nn, K, ta, at, lda, tb, bt, ldb, part.data() + m0 * N + n0, N, acc);
          for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n) {
              const bool inside = m >= m0 && m < m0 + mm && n >= n0 && n < n0 + nn;
              const float want = inside ? full[m * N + n] : c0[m * N + n];
              ASSERT_TRUE(same_bits(part[m * N + n], want))
                  << name(isa) << " ta=" << ta << " tb=" << tb << " acc=" << acc << " at (" << m << ", " << n
                  << "): " << part[m * N + n] << " vs " << want
                  << (inside ? " (the full product's)" : " (outside the block: must be untouched)");
            }
        }
}

TEST(GemmBlocked, EachElementIsItsKBlocksFmaChainsInOrder) {
  if (isas_here().empty()) GTEST_SKIP() << "CPU without AVX2 and FMA";
  // The rounding contract, element by element: P = the blocks of 384 values of k, each summed
  // as c = fma(a_k, b_k, c) from zero, added in order; C = P, or C + P when accumulating (C's
  // NaN must not leak without it).
  const int64_t M = 13, N = 35, K = 1000, block = 384;
  const std::vector<float> a = wave(static_cast<size_t>(M * K), 1.3), b = wave(static_cast<size_t>(K * N), 0.9);
  for (GemmIsa isa : isas_here())
    for (bool acc : {false, true}) {
      std::vector<float> c(static_cast<size_t>(M * N), acc ? 0.25f : std::nanf(""));
      gemm_blocked(isa, M, N, K, false, a.data(), K, false, b.data(), N, c.data(), N, acc);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          float p = 0.0f;
          for (int64_t k0 = 0; k0 < K; k0 += block) {
            float s = 0.0f;
            for (int64_t k = k0; k < std::min(K, k0 + block); ++k) s = std::fma(a[m * K + k], b[k * N + n], s);
            p = k0 == 0 ? s : p + s;
          }
          const float want = acc ? 0.25f + p : p;
          ASSERT_TRUE(same_bits(c[m * N + n], want))
              << name(isa) << " acc=" << acc << " at (" << m << ", " << n << "): " << c[m * N + n] << " vs " << want;
        }
    }
}

TEST(GemmBlocked, AccumulatingAddsTheProductComputedAlone) {
  if (isas_here().empty()) GTEST_SKIP() << "CPU without AVX2 and FMA";
  // Gradient accumulation over micro-batches (C += dW of the next one) must give the bits of
  // the two products computed alone and added, as the ranks' reduction adds them: within one K
  // block and across several.
  for (GemmIsa isa : isas_here())
    for (int64_t K : {100, 900}) {
      const int64_t M = 29, N = 37;
      const std::vector<float> a = wave(static_cast<size_t>(M * K), 0.21), b = wave(static_cast<size_t>(K * N), 0.53);
      const std::vector<float> c0 = wave(static_cast<size_t>(M * N), 0.05);
      std::vector<float> accumulated = c0, alone(c0.size());
      gemm_blocked(isa, M, N, K, true, a.data(), M, false, b.data(), N, accumulated.data(), N, /*accumulate=*/true);
      gemm_blocked(isa, M, N, K, true, a.data(), M, false, b.data(), N, alone.data(), N, /*accumulate=*/false);
      for (size_t i = 0; i < c0.size(); ++i)
        ASSERT_TRUE(same_bits(accumulated[i], c0[i] + alone[i]))
            << name(isa) << " K=" << K << " at " << i << ": " << accumulated[i] << " vs " << c0[i] << " + " << alone[i];
    }
}

TEST(GemmBlocked, EmptyInnerDimension) {
  if (isas_here().empty()) GTEST_SKIP() << "CPU without AVX2 and FMA";
  const float* none = nullptr;
  for (GemmIsa isa : isas_here()) {
    std::vector<float> c(6, std::nanf(""));
    gemm_blocked(isa, 2, 3, 0, false, none, 1, false, none, 3, c.data(), 3, false);
    for (float v : c) EXPECT_EQ(v, 0.0f) << name(isa);
    std::vector<float> d(6, 1.5f);
    gemm_blocked(isa, 2, 3, 0, false, none, 1, false, none, 3, d.data(), 3, true);
    for (float v : d) EXPECT_EQ(v, 1.5f) << name(isa);
  }
}

TEST(GemmBlocked, Bf16OperandsGiveTheBitsOfTheirF32Widening) {
  // bf16 operands are widened as they are packed (both packing paths, every transpose, edges,
  // several K blocks, accumulating or not): the bits of the f32 product of the widened values.
  if (isas_here().empty()) GTEST_SKIP() << "CPU without AVX2 and FMA";
  const int64_t M = 37, N = 45, K = 801;
  std::vector<BFloat16> a16(static_cast<size_t>(M * K)), b16(static_cast<size_t>(K * N));
  std::vector<float> a32(a16.size()), b32(b16.size());
  const std::vector<float> wa = wave(a16.size(), 0.31), wb = wave(b16.size(), 0.47);
  for (size_t i = 0; i < a16.size(); ++i) a32[i] = static_cast<float>(a16[i] = BFloat16(wa[i]));
  for (size_t i = 0; i < b16.size(); ++i) b32[i] = static_cast<float>(b16[i] = BFloat16(wb[i]));
  for (GemmIsa isa : isas_here())
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (bool acc : {false, true}) {
          const int64_t lda = ta ? M : K, ldb = tb ? K : N;
          std::vector<float> want = wave(static_cast<size_t>(M * N), 0.8), got = want;
          gemm_blocked(isa, M, N, K, ta, a32.data(), lda, tb, b32.data(), ldb, want.data(), N, acc);
          gemm_blocked(isa, M, N, K, ta, a16.data(), lda, tb, b16.data(), ldb, got.data(), N, acc);
          for (size_t i = 0; i < want.size(); ++i)
            ASSERT_TRUE(same_bits(got[i], want[i])) << name(isa) << " ta=" << ta << " tb=" << tb << " acc=" << acc
                                                    << " at " << i << ": " << got[i] << " vs " << want[i];
        }
}

#if ZDL_TEST_WIDE_BLOCK
// The wide block against the AVX2 instance on operands of type S (float, or bf16 from the same
// waves), bit for bit, over shapes around the block sizes.
template <class S>
void expect_wide_block_matches_avx2(std::initializer_list<int64_t> Ms, std::initializer_list<int64_t> Ns,
                                    std::initializer_list<int64_t> Ks) {
  for (int64_t M : Ms)
    for (int64_t N : Ns)
      for (int64_t K : Ks)
        for (bool ta : {false, true})
          for (bool tb : {false, true})
            for (bool acc : {false, true}) {
              const int64_t lda = ta ? M : K, ldb = tb ? K : N;
              const std::vector<float> wa = wave(static_cast<size_t>(M * K), 0.29), wb = wave(static_cast<size_t>(K * N), 0.17);
              const std::vector<S> a(wa.begin(), wa.end()), b(wb.begin(), wb.end());
              std::vector<float> narrow = wave(static_cast<size_t>(M * N), 0.6), wide = narrow;
              gemm_blocked(GemmIsa::Avx2, M, N, K, ta, a.data(), lda, tb, b.data(), ldb, narrow.data(), N, acc);
              gemm_blocked_body<Ymm, 12, 4, S>(M, N, K, ta, a.data(), lda, tb, b.data(), ldb, wide.data(), N, acc);
              for (size_t i = 0; i < narrow.size(); ++i)
                ASSERT_TRUE(same_bits(wide[i], narrow[i]))
                    << (sizeof(S) == 2 ? "bf16" : "f32") << " M=" << M << " N=" << N << " K=" << K << " ta=" << ta
                    << " tb=" << tb << " acc=" << acc << " at " << i << ": " << wide[i] << " vs " << narrow[i];
            }
}
#endif

TEST(GemmBlocked, WideBlockGivesTheAvx2Bits) {
  // The 12 x 32 block of the AVX-512 instance, on AVX2 registers here, against the AVX2
  // instance's 6 x 16, bit for bit: every transpose, with and without accumulating, K within one
  // block, past one and not a multiple of 8 (the transposing pack's tail), and M, N around the
  // block sizes (whole blocks, one short, one over; strips of 12 with fewer than 8 lanes left);
  // f32 operands and bf16 ones.
#if ZDL_TEST_WIDE_BLOCK
  if (!gemm_blocked_supported(GemmIsa::Avx2)) GTEST_SKIP() << "CPU without AVX2 and FMA";
  expect_wide_block_matches_avx2<float>({1, 11, 12, 13, 24, 101}, {1, 31, 32, 33, 70}, {5, 384, 389, 800});
  expect_wide_block_matches_avx2<BFloat16>({5, 12, 13, 101}, {7, 32, 33}, {5, 389});
#else
  GTEST_SKIP() << "not an x86 build";
#endif
}

// Both instances on operands of type S, bit for bit.
template <class S>
void expect_avx512_matches_avx2() {
  for (int64_t M : {7, 12, 100})
    for (int64_t N : {33, 64, 90})
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          const int64_t K = 777, lda = ta ? M : K, ldb = tb ? K : N;
          const std::vector<float> wa = wave(static_cast<size_t>(M * K), 0.41), wb = wave(static_cast<size_t>(K * N), 0.23);
          const std::vector<S> a(wa.begin(), wa.end()), b(wb.begin(), wb.end());
          std::vector<float> narrow(static_cast<size_t>(M * N)), wide(narrow.size());
          gemm_blocked(GemmIsa::Avx2, M, N, K, ta, a.data(), lda, tb, b.data(), ldb, narrow.data(), N, false);
          gemm_blocked(GemmIsa::Avx512, M, N, K, ta, a.data(), lda, tb, b.data(), ldb, wide.data(), N, false);
          for (size_t i = 0; i < narrow.size(); ++i)
            ASSERT_TRUE(same_bits(wide[i], narrow[i]))
                << (sizeof(S) == 2 ? "bf16" : "f32") << " M=" << M << " N=" << N << " ta=" << ta << " tb=" << tb
                << " at " << i << ": " << wide[i] << " vs " << narrow[i];
        }
}

TEST(GemmBlocked, Avx512GivesTheAvx2Bits) {
  // Ranks on AVX2 and on AVX-512 CPUs compute the same bits (gemm_blocked.h).
  if (!gemm_blocked_supported(GemmIsa::Avx512)) GTEST_SKIP() << "CPU without AVX-512";
  expect_avx512_matches_avx2<float>();
  expect_avx512_matches_avx2<BFloat16>();
}

}  // namespace
}  // namespace zdl::kernels::cpu

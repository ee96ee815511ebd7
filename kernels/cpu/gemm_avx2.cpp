#include "kernels/cpu/gemm_avx2.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ZDL_GEMM_AVX2_X86 1
#else
#define ZDL_GEMM_AVX2_X86 0
#endif

#include "core/check.h"

namespace zdl::kernels::cpu {

bool gemm_avx2_supported() {
#if ZDL_GEMM_AVX2_X86
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
#else
  return false;
#endif
}

#if ZDL_GEMM_AVX2_X86
namespace {

// Register block: 6 rows x 16 columns = 12 accumulators of 8 floats, plus two of B and one
// broadcast of A: 15 of the 16 ymm registers.
constexpr int64_t kMr = kGemmAvx2Rows, kNr = 16;
// Cache blocks: a KC x NR strip of packed B (24 KiB) stays in L1 while the kernel sweeps the
// MC x KC block of packed A (144 KiB, in L2); the KC x NC panel of B streams from L2/L3.
// Chosen by measurement on a Zen 2/3 EPYC (32 KiB L1, 512 KiB L2) over the products of a GPT
// step: 384 x 96 ran them 3-10% faster than 256 x 168, 512 x 72 or 128 x 240.
constexpr int64_t kKc = 384, kMc = 96, kNc = 2048;

#define ZDL_AVX2 __attribute__((target("avx2,fma")))

// A grow-only float buffer aligned to a cache line.
class PackBuffer {
 public:
  PackBuffer() = default;
  PackBuffer(const PackBuffer&) = delete;
  PackBuffer& operator=(const PackBuffer&) = delete;
  ~PackBuffer() { std::free(data_); }
  void reserve(int64_t n) {
    if (n <= size_) return;
    std::free(data_);
    const size_t bytes = (static_cast<size_t>(n) * sizeof(float) + 63) / 64 * 64;
    data_ = static_cast<float*>(std::aligned_alloc(64, bytes));
    ZDL_CHECK(data_ != nullptr, "gemm_avx2: out of memory for a ", bytes, "-byte packing buffer");
    size_ = n;
  }
  float* data() const { return data_; }

 private:
  float* data_ = nullptr;
  int64_t size_ = 0;
};

// Transposes the 8 x 8 block r[0..7] (rows of 8 floats) in registers.
ZDL_AVX2 inline void transpose8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20), r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20), r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31), r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31), r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// Copies W floats (6 or 16) with vector moves.
template <int64_t W>
ZDL_AVX2 inline void copy_lanes(const float* src, float* dst) {
  if constexpr (W == 16) {
    _mm256_storeu_ps(dst, _mm256_loadu_ps(src));
    _mm256_storeu_ps(dst + 8, _mm256_loadu_ps(src + 8));
  } else {
    static_assert(W == 6);
    _mm_storeu_ps(dst, _mm_loadu_ps(src));
    std::memcpy(dst + 4, src + 4, 2 * sizeof(float));  // one 8-byte move, no alignment assumed
  }
}

// Packs a panel P (kc x width) into strips of W lanes, k-major: strip s (starting at
// dst + s * kc) holds dst[k * W + w] = P[k, s + w]; lanes past width are zero. P[k, j] is
// src[k * ld + j] when rows_contiguous, else src[j * ld + k]. op(A) packs as P = op(A)^T in
// strips of 6 rows, op(B) as P = op(B) in strips of 16 columns. Writes up to 8 floats past the
// last strip (the buffers have that slack).
template <int64_t W>
ZDL_AVX2 void pack(int64_t kc, int64_t width, bool rows_contiguous, const float* src, int64_t ld, float* dst) {
  const int64_t full = width / W * W;  // lanes in whole strips
  if (rows_contiguous) {
    // Row k of the panel is read once and dealt to every strip.
    for (int64_t k = 0; k < kc; ++k) {
      const float* row = src + k * ld;
      for (int64_t s = 0; s < full; s += W) copy_lanes<W>(row + s, dst + s * kc + k * W);
      for (int64_t w = 0; w < W && full < width; ++w) dst[full * kc + k * W + w] = full + w < width ? row[full + w] : 0.0f;
    }
    return;
  }
  // Lane j of the panel is contiguous in k: 8 lanes x 8 k are transposed in registers (missing
  // lanes zero). Each transposed k's 8 floats are stored whole; where a strip has fewer than 8
  // lanes left, the surplus lands on the next k's (or the next strip's) place, written after it.
  for (int64_t s = 0; s < width; s += W) {
    float* d = dst + s * kc;
    const int64_t lanes = std::min(W, width - s);
    int64_t k = 0;
    for (; k + 8 <= kc; k += 8) {
      for (int64_t h = 0; h < W; h += 8) {
        __m256 r[8];
        for (int64_t i = 0; i < 8; ++i)
          r[i] = h + i < lanes ? _mm256_loadu_ps(src + (s + h + i) * ld + k) : _mm256_setzero_ps();
        transpose8(r);
        for (int64_t i = 0; i < 8; ++i) _mm256_storeu_ps(d + (k + i) * W + h, r[i]);
      }
    }
    for (; k < kc; ++k)
      for (int64_t w = 0; w < W; ++w) d[k * W + w] = w < lanes ? src[(s + w) * ld + k] : 0.0f;
  }
}

// c[6 x 16] (ldc) = the block's sums, or c + them when add; each sum is one FMA chain from zero
// over the kc values of k. next is the C block the following call works on: its lines are fetched while
// this one computes, so that call's loads of C (bias rows, or the sums of an earlier K block)
// find them in cache.
ZDL_AVX2 void kernel_6x16(int64_t kc, const float* pa, const float* pb, float* c, int64_t ldc, bool add,
                          const float* next) {
  for (int64_t r = 0; r < kMr; ++r) {
    _mm_prefetch(reinterpret_cast<const char*>(next + r * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(next + r * ldc + kNr - 1), _MM_HINT_T0);
  }
  __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
  c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = _mm256_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_loadu_ps(pb), b1 = _mm256_loadu_ps(pb + 8);
    __m256 a = _mm256_broadcast_ss(pa + 0);
    c00 = _mm256_fmadd_ps(a, b0, c00), c01 = _mm256_fmadd_ps(a, b1, c01);
    a = _mm256_broadcast_ss(pa + 1);
    c10 = _mm256_fmadd_ps(a, b0, c10), c11 = _mm256_fmadd_ps(a, b1, c11);
    a = _mm256_broadcast_ss(pa + 2);
    c20 = _mm256_fmadd_ps(a, b0, c20), c21 = _mm256_fmadd_ps(a, b1, c21);
    a = _mm256_broadcast_ss(pa + 3);
    c30 = _mm256_fmadd_ps(a, b0, c30), c31 = _mm256_fmadd_ps(a, b1, c31);
    a = _mm256_broadcast_ss(pa + 4);
    c40 = _mm256_fmadd_ps(a, b0, c40), c41 = _mm256_fmadd_ps(a, b1, c41);
    a = _mm256_broadcast_ss(pa + 5);
    c50 = _mm256_fmadd_ps(a, b0, c50), c51 = _mm256_fmadd_ps(a, b1, c51);
    pa += kMr;
    pb += kNr;
  }
  auto put = [&](float* row, __m256 lo, __m256 hi) {
    if (add) {
      lo = _mm256_add_ps(_mm256_loadu_ps(row), lo);
      hi = _mm256_add_ps(_mm256_loadu_ps(row + 8), hi);
    }
    _mm256_storeu_ps(row, lo);
    _mm256_storeu_ps(row + 8, hi);
  };
  put(c + 0 * ldc, c00, c01);
  put(c + 1 * ldc, c10, c11);
  put(c + 2 * ldc, c20, c21);
  put(c + 3 * ldc, c30, c31);
  put(c + 4 * ldc, c40, c41);
  put(c + 5 * ldc, c50, c51);
}

// A partial block (fewer than 6 rows or 16 columns of C): the same kernel on a full-size
// scratch, copied in and out over the valid part only. The padded rows and columns multiply
// packed zeros and are dropped, so each valid element's chain is the full-block one.
ZDL_AVX2 void kernel_edge(int64_t kc, const float* pa, const float* pb, float* c, int64_t ldc, int64_t rows,
                          int64_t cols, bool add) {
  alignas(32) float buf[kMr * kNr];
  if (add)
    for (int64_t r = 0; r < rows; ++r) std::memcpy(buf + r * kNr, c + r * ldc, static_cast<size_t>(cols) * sizeof(float));
  kernel_6x16(kc, pa, pb, buf, kNr, add, c);
  for (int64_t r = 0; r < rows; ++r) std::memcpy(c + r * ldc, buf + r * kNr, static_cast<size_t>(cols) * sizeof(float));
}

}  // namespace

void gemm_avx2(int64_t M, int64_t N, int64_t K, bool trans_a, const float* a, int64_t lda, bool trans_b,
               const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  ZDL_CHECK(gemm_avx2_supported(), "gemm_avx2: this CPU lacks AVX2 or FMA");
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    if (!accumulate)
      for (int64_t m = 0; m < M; ++m) std::fill(c + m * ldc, c + m * ldc + N, 0.0f);
    return;
  }
  if (accumulate && K > kKc) {
    // C + P with P summed as without accumulate, not C + P1 + P2 block by block: adding a
    // product onto C is then the same sum as adding the product computed alone.
    thread_local PackBuffer product;
    product.reserve(M * N);
    float* p = product.data();
    gemm_avx2(M, N, K, trans_a, a, lda, trans_b, b, ldb, p, N, /*accumulate=*/false);
    for (int64_t m = 0; m < M; ++m) {
      float* row = c + m * ldc;
      const float* add = p + m * N;
#pragma omp simd
      for (int64_t n = 0; n < N; ++n) row[n] += add[n];
    }
    return;
  }
  // This thread's packing buffers (64-byte aligned, so no vector load splits a cache line).
  thread_local PackBuffer packed_a, packed_b;
  const int64_t nc_max = std::min(kNc, (N + kNr - 1) / kNr * kNr);
  const int64_t mc_max = std::min(kMc, (M + kMr - 1) / kMr * kMr);
  const int64_t kc_max = std::min(kKc, K);
  packed_b.reserve(kc_max * nc_max + 8);  // pack's slack
  packed_a.reserve(kc_max * mc_max + 8);

  for (int64_t jc = 0; jc < N; jc += kNc) {
    const int64_t nc = std::min(kNc, N - jc);
    for (int64_t pc = 0; pc < K; pc += kKc) {
      const int64_t kc = std::min(kKc, K - pc);
      const bool add = accumulate || pc > 0;  // this block's sums go onto C's value
      pack<kNr>(kc, nc, !trans_b, trans_b ? b + jc * ldb + pc : b + pc * ldb + jc, ldb, packed_b.data());
      for (int64_t ic = 0; ic < M; ic += kMc) {
        const int64_t mc = std::min(kMc, M - ic);
        pack<kMr>(kc, mc, trans_a, trans_a ? a + pc * lda + ic : a + ic * lda + pc, lda, packed_a.data());
        for (int64_t jr = 0; jr < nc; jr += kNr) {
          const int64_t cols = std::min(kNr, nc - jr);
          const float* pb = packed_b.data() + jr * kc;
          for (int64_t ir = 0; ir < mc; ir += kMr) {
            const int64_t rows = std::min(kMr, mc - ir);
            const float* pa = packed_a.data() + ir * kc;
            float* ct = c + (ic + ir) * ldc + jc + jr;
            // The next block down, else the top of the next column of blocks.
            const float* next = ir + kMr < mc   ? ct + kMr * ldc
                                : jr + kNr < nc ? c + ic * ldc + jc + jr + kNr
                                                : ct;
            if (rows == kMr && cols == kNr) kernel_6x16(kc, pa, pb, ct, ldc, add, next);
            else kernel_edge(kc, pa, pb, ct, ldc, rows, cols, add);
          }
        }
      }
    }
  }
}

#else

void gemm_avx2(int64_t, int64_t, int64_t, bool, const float*, int64_t, bool, const float*, int64_t, float*, int64_t,
               bool) {
  ZDL_CHECK(false, "gemm_avx2: not an x86 build");
}

#endif

}  // namespace zdl::kernels::cpu

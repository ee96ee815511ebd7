// The body of zerodl's blocked f32 product (kernels/cpu/gemm_blocked.h), written once for any
// vector width: packing, the register kernel and the cache-blocked driver, templates over a
// vector type V (the Ymm below, or gemm_blocked_avx512.cpp's Zmm), the register block's shape
// (MR rows x NV vectors of columns) and the operands' element type S (float, or BFloat16,
// widened to f32 exactly as it is packed).
//
// Included by one .cpp per instruction set, after it defines ZDL_GEMM_TARGET as that set's
// function attribute; everything here lands in that file's anonymous namespace. Every function
// carries the attribute, so a compiler may use those instructions in them and nowhere else. (Separate per-file
// compiler flags would let the linker keep an AVX-512 copy of some shared inline function and
// run it on a CPU without AVX-512.) No include guard on purpose.
//
// Rounding, whatever V, MR and NV: each element is the sum, in order, of K's blocks of kKc values
// of k, each block one chain of fused multiply-adds from zero, then one addition onto C when
// accumulating. The lane count never enters it, so every instance gives the same bits.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include <immintrin.h>

#include "core/check.h"
#include "core/dtype.h"

#ifndef ZDL_GEMM_TARGET
#error "define ZDL_GEMM_TARGET (the instruction set's function attribute) before including gemm_blocked_impl.h"
#endif

namespace zdl::kernels::cpu {
namespace {

// Loops over a register block's rows and vectors must unroll for the block to stay in registers.
#define ZDL_GEMM_UNROLL _Pragma("GCC unroll 16")

// Cache blocks: a kKc x NR strip of packed B stays in L1 (or L2 at the widest) while the kernel
// sweeps the kMc x kKc block of packed A (144 KiB, in L2); the kKc x kNc panel of B streams from
// L2/L3. kKc is part of the rounding (above). Chosen by measurement on a Zen 2/3 EPYC (32 KiB L1,
// 512 KiB L2) over the products of a GPT step: 384 x 96 ran them 3-10% faster than 256 x 168,
// 512 x 72 or 128 x 240. kMc is a multiple of every instance's MR (6, 12).
constexpr int64_t kKc = 384, kMc = 96, kNc = 2048;

// Eight lanes: AVX2 and FMA.
struct Ymm {
  using Reg = __m256;
  static constexpr int64_t kLanes = 8;
  static ZDL_GEMM_TARGET Reg zero() { return _mm256_setzero_ps(); }
  static ZDL_GEMM_TARGET Reg load(const float* p) { return _mm256_loadu_ps(p); }
  static ZDL_GEMM_TARGET Reg broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  static ZDL_GEMM_TARGET Reg fma(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }  // a * b + c
  static ZDL_GEMM_TARGET Reg add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
  static ZDL_GEMM_TARGET void store(float* p, Reg v) { _mm256_storeu_ps(p, v); }
};

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
    ZDL_CHECK(data_ != nullptr, "gemm_blocked: out of memory for a ", bytes, "-byte packing buffer");
    size_ = n;
  }
  float* data() const { return data_; }

 private:
  float* data_ = nullptr;
  int64_t size_ = 0;
};

// Transposes the 8 x 8 block r[0..7] (rows of 8 floats) in registers.
ZDL_GEMM_TARGET inline void transpose8(__m256 r[8]) {
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

// Eight operand values from p as f32 (a bf16 is the high half of its f32: exact).
ZDL_GEMM_TARGET inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
ZDL_GEMM_TARGET inline __m256 load8(const BFloat16* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}
// Four, likewise.
ZDL_GEMM_TARGET inline __m128 load4(const float* p) { return _mm_loadu_ps(p); }
ZDL_GEMM_TARGET inline __m128 load4(const BFloat16* p) {
  const __m128i wide = _mm_cvtepu16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm_castsi128_ps(_mm_slli_epi32(wide, 16));
}

// Copies W values as f32 with vector moves: 8 at a time, then 4, then one by one (no alignment
// assumed).
template <int64_t W, class S>
ZDL_GEMM_TARGET inline void copy_lanes(const S* src, float* dst) {
  constexpr int64_t eights = W / 8 * 8, fours = W / 4 * 4;
  ZDL_GEMM_UNROLL
  for (int64_t w = 0; w < eights; w += 8) _mm256_storeu_ps(dst + w, load8(src + w));
  if constexpr (fours > eights) _mm_storeu_ps(dst + eights, load4(src + eights));
  ZDL_GEMM_UNROLL
  for (int64_t w = fours; w < W; ++w) dst[w] = static_cast<float>(src[w]);
}

// Packs a panel P (kc x width) into strips of W lanes, k-major: strip s (starting at
// dst + s * kc) holds dst[k * W + w] = P[k, s + w]; lanes past width are zero. P[k, j] is
// src[k * ld + j] when rows_contiguous, else src[j * ld + k]. op(A) packs as P = op(A)^T in
// strips of MR rows, op(B) as P = op(B) in strips of NR columns. Writes up to 8 floats past the
// last strip (the buffers have that slack).
template <int64_t W, class S>
ZDL_GEMM_TARGET void pack(int64_t kc, int64_t width, bool rows_contiguous, const S* src, int64_t ld, float* dst) {
  const int64_t full = width / W * W;  // lanes in whole strips
  if (rows_contiguous) {
    // Row k of the panel is read once and dealt to every strip.
    for (int64_t k = 0; k < kc; ++k) {
      const S* row = src + k * ld;
      for (int64_t s = 0; s < full; s += W) copy_lanes<W>(row + s, dst + s * kc + k * W);
      for (int64_t w = 0; w < W && full < width; ++w)
        dst[full * kc + k * W + w] = full + w < width ? static_cast<float>(row[full + w]) : 0.0f;
    }
    return;
  }
  // Lane j of the panel is contiguous in k: 8 lanes x 8 k are transposed in registers (missing
  // lanes zero). Each transposed k's 8 floats are stored whole; where a strip's last group has
  // fewer than 8 lanes (W = 6, 12), the surplus lands on the next k's first lanes (or the next
  // strip's), which are written after it: the groups go from the last to the first.
  constexpr int64_t last_group = (W - 1) / 8 * 8;
  for (int64_t s = 0; s < width; s += W) {
    float* d = dst + s * kc;
    const int64_t lanes = std::min(W, width - s);
    int64_t k = 0;
    for (; k + 8 <= kc; k += 8) {
      for (int64_t h = last_group; h >= 0; h -= 8) {
        __m256 r[8];
        for (int64_t i = 0; i < 8; ++i)
          r[i] = h + i < lanes ? load8(src + (s + h + i) * ld + k) : _mm256_setzero_ps();
        transpose8(r);
        for (int64_t i = 0; i < 8; ++i) _mm256_storeu_ps(d + (k + i) * W + h, r[i]);
      }
    }
    for (; k < kc; ++k)
      for (int64_t w = 0; w < W; ++w) d[k * W + w] = w < lanes ? static_cast<float>(src[(s + w) * ld + k]) : 0.0f;
  }
}

// c[MR x NR] (ldc) = the block's sums, or c + them when add; each sum is one FMA chain from zero
// over the kc values of k. next is the C block the following call works on: its lines are fetched
// while this one computes, so that call's loads of C (bias rows, or the sums of an earlier K
// block) find them in cache.
template <class V, int64_t MR, int64_t NV>
ZDL_GEMM_TARGET void kernel_block(int64_t kc, const float* pa, const float* pb, float* c, int64_t ldc, bool add,
                                  const float* next) {
  constexpr int64_t L = V::kLanes, NR = NV * L;
  ZDL_GEMM_UNROLL
  for (int64_t r = 0; r < MR; ++r) {
    _mm_prefetch(reinterpret_cast<const char*>(next + r * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(next + r * ldc + NR - 1), _MM_HINT_T0);
  }
  typename V::Reg acc[MR][NV];
  ZDL_GEMM_UNROLL
  for (int64_t r = 0; r < MR; ++r) {
    ZDL_GEMM_UNROLL
    for (int64_t v = 0; v < NV; ++v) acc[r][v] = V::zero();
  }
  for (int64_t k = 0; k < kc; ++k) {
    typename V::Reg b[NV];
    ZDL_GEMM_UNROLL
    for (int64_t v = 0; v < NV; ++v) b[v] = V::load(pb + v * L);
    ZDL_GEMM_UNROLL
    for (int64_t r = 0; r < MR; ++r) {
      const typename V::Reg a = V::broadcast(pa + r);
      ZDL_GEMM_UNROLL
      for (int64_t v = 0; v < NV; ++v) acc[r][v] = V::fma(a, b[v], acc[r][v]);
    }
    pa += MR;
    pb += NR;
  }
  ZDL_GEMM_UNROLL
  for (int64_t r = 0; r < MR; ++r) {
    float* row = c + r * ldc;
    ZDL_GEMM_UNROLL
    for (int64_t v = 0; v < NV; ++v) V::store(row + v * L, add ? V::add(V::load(row + v * L), acc[r][v]) : acc[r][v]);
  }
}

// A partial block (fewer than MR rows or NR columns of C): the same kernel on a full-size
// scratch, copied in and out over the valid part only. The padded rows and columns multiply
// packed zeros and are dropped, so each valid element's chain is the full-block one.
template <class V, int64_t MR, int64_t NV>
ZDL_GEMM_TARGET void kernel_edge(int64_t kc, const float* pa, const float* pb, float* c, int64_t ldc, int64_t rows,
                                 int64_t cols, bool add) {
  constexpr int64_t NR = NV * V::kLanes;
  alignas(64) float buf[MR * NR];
  if (add)
    for (int64_t r = 0; r < rows; ++r) std::memcpy(buf + r * NR, c + r * ldc, static_cast<size_t>(cols) * sizeof(float));
  kernel_block<V, MR, NV>(kc, pa, pb, buf, NR, add, c);
  for (int64_t r = 0; r < rows; ++r) std::memcpy(c + r * ldc, buf + r * NR, static_cast<size_t>(cols) * sizeof(float));
}

// C[M,N] = op(A) op(B), or += when accumulate, on the calling thread (gemm_blocked.h's contract).
template <class V, int64_t MR, int64_t NV, class S>
ZDL_GEMM_TARGET void gemm_blocked_body(int64_t M, int64_t N, int64_t K, bool trans_a, const S* a, int64_t lda,
                                       bool trans_b, const S* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  constexpr int64_t NR = NV * V::kLanes;
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
    gemm_blocked_body<V, MR, NV, S>(M, N, K, trans_a, a, lda, trans_b, b, ldb, p, N, /*accumulate=*/false);
    for (int64_t m = 0; m < M; ++m) {
      float* row = c + m * ldc;
      const float* sum = p + m * N;
      for (int64_t n = 0; n < N; ++n) row[n] += sum[n];  // vectorized at -O2 and above
    }
    return;
  }
  // This thread's packing buffers (64-byte aligned, so no vector load splits a cache line).
  thread_local PackBuffer packed_a, packed_b;
  const int64_t nc_max = std::min(kNc, (N + NR - 1) / NR * NR);
  const int64_t mc_max = std::min(kMc, (M + MR - 1) / MR * MR);
  const int64_t kc_max = std::min(kKc, K);
  packed_b.reserve(kc_max * nc_max + 8);  // pack's slack
  packed_a.reserve(kc_max * mc_max + 8);

  for (int64_t jc = 0; jc < N; jc += kNc) {
    const int64_t nc = std::min(kNc, N - jc);
    for (int64_t pc = 0; pc < K; pc += kKc) {
      const int64_t kc = std::min(kKc, K - pc);
      const bool add = accumulate || pc > 0;  // this block's sums go onto C's value
      pack<NR>(kc, nc, !trans_b, trans_b ? b + jc * ldb + pc : b + pc * ldb + jc, ldb, packed_b.data());
      for (int64_t ic = 0; ic < M; ic += kMc) {
        const int64_t mc = std::min(kMc, M - ic);
        pack<MR>(kc, mc, trans_a, trans_a ? a + pc * lda + ic : a + ic * lda + pc, lda, packed_a.data());
        for (int64_t jr = 0; jr < nc; jr += NR) {
          const int64_t cols = std::min(NR, nc - jr);
          const float* pb = packed_b.data() + jr * kc;
          for (int64_t ir = 0; ir < mc; ir += MR) {
            const int64_t rows = std::min(MR, mc - ir);
            const float* pa = packed_a.data() + ir * kc;
            float* ct = c + (ic + ir) * ldc + jc + jr;
            // The next block down, else the top of the next column of blocks.
            const float* next = ir + MR < mc   ? ct + MR * ldc
                                : jr + NR < nc ? c + ic * ldc + jc + jr + NR
                                               : ct;
            if (rows == MR && cols == NR) kernel_block<V, MR, NV>(kc, pa, pb, ct, ldc, add, next);
            else kernel_edge<V, MR, NV>(kc, pa, pb, ct, ldc, rows, cols, add);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace zdl::kernels::cpu

#undef ZDL_GEMM_UNROLL

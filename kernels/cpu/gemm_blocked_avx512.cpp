// The AVX-512 instance of zerodl's blocked f32 product (gemm_blocked.h): 12 x 32 register
// blocks, 24 zmm sums, two of B and one broadcast of A. Its own file so that only these
// functions may hold AVX-512 instructions (gemm_blocked_impl.h).
#if defined(__x86_64__) || defined(__i386__)
#define ZDL_GEMM_TARGET __attribute__((target("avx512f,avx2,fma")))
#include "kernels/cpu/gemm_blocked_impl.h"

namespace zdl::kernels::cpu {
namespace {

// Sixteen lanes: AVX-512 F.
struct Zmm {
  using Reg = __m512;
  static constexpr int64_t kLanes = 16;
  static ZDL_GEMM_TARGET Reg zero() { return _mm512_setzero_ps(); }
  static ZDL_GEMM_TARGET Reg load(const float* p) { return _mm512_loadu_ps(p); }
  static ZDL_GEMM_TARGET Reg broadcast(const float* p) { return _mm512_set1_ps(*p); }
  static ZDL_GEMM_TARGET Reg fma(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }  // a * b + c
  static ZDL_GEMM_TARGET Reg add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  static ZDL_GEMM_TARGET void store(float* p, Reg v) { _mm512_storeu_ps(p, v); }
};

}  // namespace

// Declared and called by gemm_blocked.cpp, only where the CPU has AVX-512 F.
void gemm_blocked_avx512(int64_t M, int64_t N, int64_t K, bool trans_a, const float* a, int64_t lda, bool trans_b,
                         const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  gemm_blocked_body<Zmm, 12, 2, float>(M, N, K, trans_a, a, lda, trans_b, b, ldb, c, ldc, accumulate);
}
void gemm_blocked_avx512(int64_t M, int64_t N, int64_t K, bool trans_a, const BFloat16* a, int64_t lda,
                         bool trans_b, const BFloat16* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  gemm_blocked_body<Zmm, 12, 2, BFloat16>(M, N, K, trans_a, a, lda, trans_b, b, ldb, c, ldc, accumulate);
}

}  // namespace zdl::kernels::cpu
#endif

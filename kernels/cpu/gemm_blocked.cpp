#include "kernels/cpu/gemm_blocked.h"

#include "core/check.h"

#if defined(__x86_64__) || defined(__i386__)
#define ZDL_GEMM_X86 1
#define ZDL_GEMM_TARGET __attribute__((target("avx2,fma")))
#include "kernels/cpu/gemm_blocked_impl.h"
#undef ZDL_GEMM_TARGET
#else
#define ZDL_GEMM_X86 0
#endif

namespace zdl::kernels::cpu {

#if ZDL_GEMM_X86
// The AVX-512 instance (gemm_blocked_avx512.cpp), for f32 and bf16 operands.
void gemm_blocked_avx512(int64_t M, int64_t N, int64_t K, bool trans_a, const float* a, int64_t lda, bool trans_b,
                         const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate);
void gemm_blocked_avx512(int64_t M, int64_t N, int64_t K, bool trans_a, const BFloat16* a, int64_t lda,
                         bool trans_b, const BFloat16* b, int64_t ldb, float* c, int64_t ldc, bool accumulate);
#endif

namespace {

template <class S>
void dispatch(GemmIsa isa, int64_t M, int64_t N, int64_t K, bool trans_a, const S* a, int64_t lda, bool trans_b,
              const S* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  ZDL_CHECK(gemm_blocked_supported(isa), "gemm_blocked: this CPU lacks ",
            isa == GemmIsa::Avx512 ? "AVX-512" : "AVX2 or FMA");
#if ZDL_GEMM_X86
  if (isa == GemmIsa::Avx512) gemm_blocked_avx512(M, N, K, trans_a, a, lda, trans_b, b, ldb, c, ldc, accumulate);
  else gemm_blocked_body<Ymm, 6, 2, S>(M, N, K, trans_a, a, lda, trans_b, b, ldb, c, ldc, accumulate);
#else
  (void)M, (void)N, (void)K, (void)trans_a, (void)a, (void)lda, (void)trans_b, (void)b, (void)ldb, (void)c, (void)ldc,
      (void)accumulate;
#endif
}

}  // namespace

bool gemm_blocked_supported(GemmIsa isa) {
#if ZDL_GEMM_X86
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  static const bool avx512 = avx2 && __builtin_cpu_supports("avx512f");
  return isa == GemmIsa::Avx512 ? avx512 : avx2;
#else
  (void)isa;
  return false;
#endif
}

int64_t gemm_blocked_rows(GemmIsa isa) { return isa == GemmIsa::Avx512 ? 12 : 6; }

void gemm_blocked(GemmIsa isa, int64_t M, int64_t N, int64_t K, bool trans_a, const float* a, int64_t lda,
                  bool trans_b, const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  dispatch(isa, M, N, K, trans_a, a, lda, trans_b, b, ldb, c, ldc, accumulate);
}

void gemm_blocked(GemmIsa isa, int64_t M, int64_t N, int64_t K, bool trans_a, const BFloat16* a, int64_t lda,
                  bool trans_b, const BFloat16* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  dispatch(isa, M, N, K, trans_a, a, lda, trans_b, b, ldb, c, ldc, accumulate);
}

}  // namespace zdl::kernels::cpu

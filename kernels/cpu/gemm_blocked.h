// zerodl's own f32 matrix product for x86 CPUs: operands packed into panels that stay in cache,
// and a register kernel that keeps a block of C's sums in vector registers while it walks K. Two
// instances of one body (kernels/cpu/gemm_blocked_impl.h): AVX2 and FMA, 6 x 16 blocks in 12 of
// the 16 ymm registers; AVX-512, 12 x 32 blocks in 24 of the 32 zmm registers. On AVX2-only CPUs
// the AVX2 one outruns both Eigen's and oneDNN's products in the shapes a GPT step cuts
// (docs/cpu_performance.md, "The GEMM back end").
//
// Rounding: each element of the product P = op(A) op(B) is the sum, in order, of K's blocks of
// 384 values of k, each block one chain of fused multiply-adds from zero; C becomes P, or C + P
// when accumulating (one addition, whatever K). So an element's bits depend on K alone, never on
// M, N, the tiling, which thread ran it or the instance's vector width (a stronger form of the
// tiling's thread-count invariance: the note in matmul.cpp; ranks on AVX2 and on AVX-512 CPUs
// agree), and adding one micro-batch's product onto another's gives the same bits as adding the
// two products computed alone, which bit-identical training across world sizes relies on
// (docs/exactness.md).
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace zdl::kernels::cpu {

enum class GemmIsa { Avx2, Avx512 };

// Whether this CPU has the instructions of isa's instance (AVX2 and FMA; AVX-512 F as well).
bool gemm_blocked_supported(GemmIsa isa);

// Rows of C in isa's register block (6, 12): a product split by rows is cheapest in multiples.
int64_t gemm_blocked_rows(GemmIsa isa);

// C[M,N] = op(A) op(B), or += when accumulate, on the calling thread; the layout of
// kernels/cpu/matmul.h (row-major, op(X) = X^T when trans_x). Only where gemm_blocked_supported.
// K == 0 leaves C (accumulate) or zeroes it; C is never read when !accumulate, so NaNs in it
// do not leak.
void gemm_blocked(GemmIsa isa, int64_t M, int64_t N, int64_t K, bool trans_a, const float* a, int64_t lda,
                  bool trans_b, const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate);
// bf16 operands, f32 result: each operand widened to f32 (exact) as it is packed, then the same
// sums, so the bits equal the f32 product of the widened operands.
void gemm_blocked(GemmIsa isa, int64_t M, int64_t N, int64_t K, bool trans_a, const BFloat16* a, int64_t lda,
                  bool trans_b, const BFloat16* b, int64_t ldb, float* c, int64_t ldc, bool accumulate);

}  // namespace zdl::kernels::cpu

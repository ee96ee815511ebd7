// zerodl's own f32 matrix product for CPUs with AVX2 and FMA: operands packed into panels that
// stay in cache, and a 6 x 16 register kernel that keeps 12 vector sums in registers while it
// walks K. On AVX2-only CPUs it outruns both Eigen's and oneDNN's products in the shapes a GPT
// step cuts (docs/cpu_performance.md, "The GEMM back end").
//
// Rounding: each element of the product P = op(A) op(B) is the sum, in order, of K's blocks of
// 384 values of k, each block one chain of fused multiply-adds from zero; C becomes P, or C + P
// when accumulating (one addition, whatever K). So an element's bits depend on K alone, never on
// M, N, the tiling or which thread ran it (a stronger form of the tiling's thread-count
// invariance: the note in matmul.cpp), and adding one micro-batch's product onto another's
// gives the same bits as adding the two products computed alone, which bit-identical training
// across world sizes relies on (docs/exactness.md).
#pragma once
#include <cstdint>

namespace zdl::kernels::cpu {

// Rows of C in the kernel's register block: a product split by rows is cheapest in multiples.
constexpr int64_t kGemmAvx2Rows = 6;

// Whether this CPU has AVX2 and FMA (the instructions the kernel uses).
bool gemm_avx2_supported();

// C[M,N] = op(A) op(B), or += when accumulate, on the calling thread; the layout of
// kernels/cpu/matmul.h (row-major, op(X) = X^T when trans_x). Only where gemm_avx2_supported().
// K == 0 leaves C (accumulate) or zeroes it; C is never read when !accumulate, so NaNs in it
// do not leak.
void gemm_avx2(int64_t M, int64_t N, int64_t K, bool trans_a, const float* a, int64_t lda, bool trans_b,
               const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate);

}  // namespace zdl::kernels::cpu

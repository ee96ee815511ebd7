// Matrix products on CUDA through cuBLASLt: the twins of kernels/cpu/matmul.h (same row-major
// conventions and argument order, type-erased: DType + void*). The CPU kernels are the test
// oracle (tests/cuda/matmul_cuda_test.cpp).
//
// Layout, as on the CPU: a matrix X is row-major with leading dimension ldx (elements between
// rows, >= its column count); op(X) = X, or X^T when trans_x, in which case the buffer holds
// X^T as a row-major matrix. C is plain row-major. cuBLASLt is column-major, and a row-major
// [R, C] buffer read column-major is its transpose [C, R] with the same leading dimension, so
// row-major C = op(A) op(B) is computed as column-major C^T = op(B)^T op(A)^T: B's buffer is
// cuBLASLt's A operand and A's buffer its B, m = N, n = M; no data moves.
//
// Precision: f32 with CUBLAS_COMPUTE_32F (no TF32: results match the CPU to ~1e-6) and bf16
// in/out with CUBLAS_COMPUTE_32F accumulation, one rounding of the f32 result (alpha = 1,
// beta = 0, or 1 to accumulate, in f32). Split-K algorithms are limited to ones that reduce the
// partial sums in the compute type (f32) in the workspace, never in bf16 or with atomics.
// Deterministic: the algorithm is chosen once per problem (and cached), so the same call gives
// the same bits every time on the same GPU model.
//
// Resources, per host thread and device: one cuBLASLt handle, one 32 MiB workspace allocated
// through the CUDA allocator and counted in the memory ledger under
// MemoryCategory::Workspace (once, on the first GEMM of that thread), and a cache of matmul
// descriptors, matrix layouts and the heuristic's algorithm keyed by the problem (dtype, sizes,
// transposes, leading dims, batch strides, epilogue, pointer alignments), so repeated shapes
// rebuild nothing. Everything runs on the compute stream (kernels/cuda/common.cuh). Where
// cuBLASLt offers no algorithm (unusual alignments), classic cuBLAS (cublasGemmStridedBatchedEx,
// same compute type, sharing the workspace) does the product instead.
//
// Sizes: M, N, K, ld* and batch must fit in int32 (cuBLAS's limit); checked, with a clear error.
//
//   // y[B*T, out] = x[B*T, in] @ w[out, in]^T + bias[out]
//   kernels::cuda::gemm_bias(DType::BF16, BT, out, in, false, x, in, true, w, in, bias, y, out);
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace zdl::kernels::cuda {

// C = op(A) op(B), or C += op(A) op(B) when accumulate; dtype f32 or bf16 for A, B and C.
// K == 0 gives C = 0 (or leaves C when accumulating). A, B, C device pointers; C must not
// overlap A or B.
void gemm(DType dtype, int64_t M, int64_t N, int64_t K, bool trans_a, const void* a, int64_t lda, bool trans_b,
          const void* b, int64_t ldb, void* c, int64_t ldc, bool accumulate);

// gemm on `batch` matrix triples; matrix i of X starts at element i * stride_x of x. stride_a
// or stride_b may be 0 (one operand shared by the whole batch). stride_c must not be 0 when
// batch > 1 (to sum products into one C, fold the batch into K instead), as on the CPU.
void gemm_batched(DType dtype, int64_t batch, int64_t M, int64_t N, int64_t K, bool trans_a, const void* a,
                  int64_t lda, int64_t stride_a, bool trans_b, const void* b, int64_t ldb, int64_t stride_b, void* c,
                  int64_t ldc, int64_t stride_c, bool accumulate);

// C = op(A) op(B) + bias, bias [N] contiguous (same dtype) added to every row of C: linear's
// forward in one cuBLASLt call (CUBLASLT_EPILOGUE_BIAS, bias added to the f32 result before the
// one rounding). Falls back to writing bias rows and accumulating the GEMM onto them when the
// bias pointer is not 16-byte aligned (e.g. a bias inside a ZeRO flat buffer).
void gemm_bias(DType dtype, int64_t M, int64_t N, int64_t K, bool trans_a, const void* a, int64_t lda, bool trans_b,
               const void* b, int64_t ldb, const void* bias, void* c, int64_t ldc);

// [Note: GELU in the GEMM's epilogue] The MLP's bias + GELU and their backward ride on the
// products next to them, so neither reads or writes the [rows, 4C] activations on its own:
//   gemm_bias_gelu:   pre = op(A) op(B) + bias, C = gelu(pre)   (CUBLASLT_EPILOGUE_GELU_AUX_BIAS)
//   gemm_dgelu_bgrad: dpre = gelu'(pre) * (op(A) op(B)), dbias = column sums of dpre
//                     (CUBLASLT_EPILOGUE_DGELU_BGRAD: the gradient through the GELU and its
//                     bias, straight from the product that makes the GELU output's gradient)
// cuBLASLt's GELU is the tanh form (kernels/cpu/gelu.h), computed in f32 on the unrounded
// product before the one rounding of each output. bf16 only: in f32 the separate kernels keep
// the CPU's results to 1e-6. pre / dbias / bias 16-byte aligned, ldpre a multiple of 8.
// Each returns false, writing nothing, where those conditions fail or cuBLASLt offers no
// algorithm (the caller then runs gemm_bias and the GELU kernels);
// ZDL_CUDA_GELU_EPILOGUE=0 turns both off.
bool gemm_bias_gelu(DType dtype, int64_t M, int64_t N, int64_t K, bool trans_a, const void* a, int64_t lda, bool trans_b,
                    const void* b, int64_t ldb, const void* bias, void* c, int64_t ldc, void* pre, int64_t ldpre);
bool gemm_dgelu_bgrad(DType dtype, int64_t M, int64_t N, int64_t K, bool trans_a, const void* a, int64_t lda,
                      bool trans_b, const void* b, int64_t ldb, const void* pre, int64_t ldpre, void* dpre,
                      int64_t lddpre, void* dbias);
// Products that ran with a GELU epilogue so far (tests check the fused path is taken).
int64_t gelu_epilogue_calls();

}  // namespace zdl::kernels::cuda

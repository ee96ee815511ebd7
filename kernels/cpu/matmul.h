// Matrix products on the CPU: C[M,N] (+)= op(A)[M,K] op(B)[K,N], single and strided-batched,
// f32 and f64. Pure functions on buffers; the differentiable matmul/linear live in
// autograd/ops/matmul.cpp.
//
// Layout, BLAS-style but row-major: a matrix X is stored row-major with leading dimension
// ldx (elements between rows, >= its column count). op(X) = X when trans_x is false, X^T
// when true; so with trans_a the buffer holds A^T as a row-major [K, M] matrix. The flags let
// backward multiply by transposes (dA = dC B^T, dB = A^T dC) and let transposed views of
// inputs in without a copy. C is always plain row-major.
//
// Threading. Eigen's GEMM splits one large product over the OpenMP threads itself and runs
// single-threaded when called inside a parallel region (it checks omp_get_num_threads()),
// so the batched kernel either loops over the batch and lets Eigen parallelize each product
// (few large matrices) or parallelizes over the batch with Eigen serial inside (many small
// ones); it never nests the two.
//
//   // y[B*T, out] = x[B*T, in] @ w[out, in]^T
//   gemm<float>(BT, out, in, false, x, in, true, w, in, y, out, /*accumulate=*/false);
#pragma once
#include <cstdint>

namespace zdl::kernels::cpu {

// C = op(A) op(B), or C += op(A) op(B) when accumulate. K == 0 gives C = 0 (or leaves C).
template <class T>
void gemm(int64_t M, int64_t N, int64_t K, bool trans_a, const T* a, int64_t lda, bool trans_b, const T* b,
          int64_t ldb, T* c, int64_t ldc, bool accumulate);

// gemm on `batch` matrix triples; matrix i of X starts at x + i * stride_x. stride_a or
// stride_b may be 0 (one operand shared by the whole batch). stride_c must not be 0 when
// batch > 1 (to sum products into one C, fold the batch into K instead).
template <class T>
void gemm_batched(int64_t batch, int64_t M, int64_t N, int64_t K, bool trans_a, const T* a, int64_t lda,
                  int64_t stride_a, bool trans_b, const T* b, int64_t ldb, int64_t stride_b, T* c, int64_t ldc,
                  int64_t stride_c, bool accumulate);

// out[r, :] = row for r < rows (out row-major [rows, cols], row contiguous [cols]): the bias
// of linear, written before the GEMM accumulates onto it.
template <class T>
void fill_rows(int64_t rows, int64_t cols, const T* row, T* out);

// The plain triple loop with gemm's signature: the oracle for tests (accumulates in double).
template <class T>
void gemm_reference(int64_t M, int64_t N, int64_t K, bool trans_a, const T* a, int64_t lda, bool trans_b,
                    const T* b, int64_t ldb, T* c, int64_t ldc, bool accumulate);

}  // namespace zdl::kernels::cpu

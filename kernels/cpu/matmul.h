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
// Back end. f32 products run on oneDNN's sgemm where the build found it (cmake/ZdlOneDnn.cmake)
// and the CPU has AVX-512, else on zerodl's own kernel (kernels/cpu/gemm_blocked.h, its AVX2
// instance) where the CPU has AVX2 and FMA, else on Eigen's, as f64 products always do.
// ZDL_CPU_GEMM=eigen, avx2, avx512 (zerodl's kernel on AVX-512 registers, the same bits as avx2)
// or onednn in the environment picks one at run time, for comparisons; either way the results
// do not depend on the thread count (the note in matmul.cpp).
//
// Threading. One large product is cut into tiles that the OpenMP threads share, each tile a
// single-threaded product (on zerodl's kernel, whose bits do not depend on the tiling, each
// thread takes an equal share of C's rows instead); the batched kernel either runs its products
// one after another, each tiled that way (few large matrices), or spreads the batch over the
// threads with each product serial (many small ones); it never nests the two.
//
//   // y[B*T, out] = x[B*T, in] @ w[out, in]^T
//   gemm<float>(BT, out, in, false, x, in, true, w, in, y, out, /*accumulate=*/false);
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace zdl::kernels::cpu {

enum class GemmBackend { Eigen, OneDnn, Avx2, Avx512 };
// The back end f32 products use (first read from ZDL_CPU_GEMM; throws on a bad value, on onednn
// in a build without it, or on avx2/avx512 on a CPU without those instructions). set_gemm_backend switches it
// for the whole process, for tests and benchmarks; call it between steps, never while a product
// runs.
GemmBackend gemm_backend();
// What ZDL_CPU_GEMM asks for now (the default where unset), with the same checks; read afresh at
// every call (gemm_backend reads it once), for a program checking its environment at start.
GemmBackend gemm_backend_from_environment();
bool gemm_backend_available(GemmBackend b);
void set_gemm_backend(GemmBackend b);
const char* gemm_backend_name(GemmBackend b);
// The back end a name (eigen, avx2, avx512, onednn) gives; throws on any other.
GemmBackend gemm_backend_named(const char* name);

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

// One product on the calling thread, for kernels that spread their own work items over the
// threads (attention's query blocks): zerodl's AVX2 kernel for f32 where that is the back end,
// Eigen's otherwise. Starts no threads; the layout of gemm.
template <class T>
void gemm_on_this_thread(int64_t M, int64_t N, int64_t K, bool trans_a, const T* a, int64_t lda, bool trans_b,
                         const T* b, int64_t ldb, T* c, int64_t ldc, bool accumulate);

// bf16 operands and result: gemm_batched with every product summed in f32, on top of C's value
// when accumulating, and rounded to bf16 once: on oneDNN's bf16 GEMM where the build has it, the
// oneDNN back end is in use and the CPU has AVX512-BF16 dot products (elsewhere oneDNN would
// emulate them); else on zerodl's kernel, which widens the operands as it packs them (the bits
// of the f32 product of the widened operands), wherever the CPU has AVX2 and FMA, whatever the
// f32 back end. gemm_bf16_available() says whether either applies; where neither does, bf16
// products compute in f32 through autograd (autograd/ops/bf16_compute.h).
bool gemm_bf16_available();
void gemm_bf16_batched(int64_t batch, int64_t M, int64_t N, int64_t K, bool trans_a, const BFloat16* a, int64_t lda,
                       int64_t stride_a, bool trans_b, const BFloat16* b, int64_t ldb, int64_t stride_b, BFloat16* c,
                       int64_t ldc, int64_t stride_c, bool accumulate);

// out[r, :] = row for r < rows (out row-major [rows, cols], row contiguous [cols]): the bias
// of linear, written before the GEMM accumulates onto it.
template <class T>
void fill_rows(int64_t rows, int64_t cols, const T* row, T* out);

// The plain triple loop with gemm's signature: the oracle for tests (accumulates in double).
template <class T>
void gemm_reference(int64_t M, int64_t N, int64_t K, bool trans_a, const T* a, int64_t lda, bool trans_b,
                    const T* b, int64_t ldb, T* c, int64_t ldc, bool accumulate);

}  // namespace zdl::kernels::cpu

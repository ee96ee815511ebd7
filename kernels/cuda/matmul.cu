// Matrix products on CUDA through cuBLASLt (see matmul.h for the conventions).
//
// [Note: row-major on a column-major library] A row-major [R, C] buffer with leading dimension
// ld is, read column-major, the matrix [C, R] with the same ld, i.e. its transpose. So row-major
// C[M,N] = op(A) op(B) is the column-major product C^T[N,M] = op(B)^T op(A)^T, and:
//   cuBLASLt A := our B buffer: stored col-major [N, K] (op N) or, when trans_b, [K, N] (op T)
//   cuBLASLt B := our A buffer: stored col-major [K, M] (op N) or, when trans_a, [M, K] (op T)
//   cuBLASLt C = D := our C buffer: col-major [N, M], ld = ldc;  m = N, n = M, k = K.
// The bias of CUBLASLT_EPILOGUE_BIAS has one value per row of D, i.e. per column of our C:
// exactly linear's bias over output features, broadcast over our rows.
//
// [Note: plans] Building descriptors and running the heuristic costs tens of microseconds, so
// each thread keeps, per device, a cache of plans keyed by everything the choice depends on:
// dtype, sizes, transposes, leading dimensions, batch count and strides, the epilogue, and the
// alignment (power of two up to 256 bytes) of every pointer. Alignment matters: the heuristic
// assumes 256-byte aligned buffers unless told otherwise, and views into ZeRO's flat buffers or
// sliced tensors start anywhere; we tell it the real alignment and key the plan on it, so a plan
// is only reused for pointers at least as aligned as the ones it was chosen for.
#include <cublasLt.h>
#include <cublas_v2.h>

#include <algorithm>
#include <climits>
#include <map>
#include <memory>
#include <tuple>

#include "core/allocator.h"
#include "core/memory.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/thread_device_context.h"
#include "kernels/cuda/matmul.h"

#define ZDL_CUBLAS_CHECK(call)                                                                       \
  do {                                                                                               \
    cublasStatus_t zdl_st_ = (call);                                                                 \
    if (zdl_st_ != CUBLAS_STATUS_SUCCESS)                                                            \
      ::zdl::detail::throw_error(__FILE__, __LINE__, #call,                                          \
                                 ::zdl::detail::str("cuBLAS error: ", cublasGetStatusString(zdl_st_))); \
  } while (0)

namespace zdl::kernels::cuda {

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // 32 MiB: NVIDIA's recommendation for Hopper
constexpr size_t kMaxPlans = 4096;                    // a safety valve; training uses a few dozen shapes

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::BF16: return CUDA_R_16BF;
    default: break;
  }
  ZDL_CHECK(false, "cuda gemm: dtype ", dtype_name(t), " is not supported on CUDA (f32, bf16)");
  return CUDA_R_32F;
}

// Largest power of two (<= 256) dividing an address or a byte offset.
uint32_t alignment_of(uintptr_t a) {
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align >>= 1;
  return align;
}
uint32_t alignment_of(const void* p) { return alignment_of(reinterpret_cast<uintptr_t>(p)); }

// Alignment every matrix of a strided batch shares: matrix i starts at p + i * stride elements,
// so a batch stride of an odd byte size lowers it below the first matrix's.
uint32_t batch_alignment(const void* p, int64_t batch, int64_t stride, size_t element_size) {
  uint32_t align = alignment_of(p);
  if (batch > 1) align = std::min(align, alignment_of(static_cast<uintptr_t>(stride) * element_size));
  return align;
}

struct PlanKey {
  DType dtype;
  int64_t batch, M, N, K;
  bool trans_a, trans_b;
  int64_t lda, ldb, ldc, stride_a, stride_b, stride_c;
  bool bias;
  uint32_t align_a, align_b, align_c, align_bias;

  auto tie() const {
    return std::tie(dtype, batch, M, N, K, trans_a, trans_b, lda, ldb, ldc, stride_a, stride_b, stride_c, bias, align_a,
                    align_b, align_c, align_bias);
  }
  bool operator<(const PlanKey& o) const { return tie() < o.tie(); }
};

// Descriptors, layouts and the chosen algorithm of one problem (RAII).
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t lt_a = nullptr, lt_b = nullptr, lt_c = nullptr;  // cuBLASLt's A (our B), B (our A), C = D
  cublasLtMatmulAlgo_t algo{};
  bool use_lt = false;  // false: cuBLASLt offered no algorithm; use classic cuBLAS

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {  // destroy calls only free host memory; errors are ignored (may run at thread exit)
    if (lt_c) cublasLtMatrixLayoutDestroy(lt_c);
    if (lt_b) cublasLtMatrixLayoutDestroy(lt_b);
    if (lt_a) cublasLtMatrixLayoutDestroy(lt_a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

// One per (host thread, device): handles, the workspace and the plan cache.
class GemmContext {
 public:
  explicit GemmContext(int device) : device_(Device::cuda(device)) {
    // The workspace is a real allocation of the CUDA allocator, visible in the memory ledger (a
    // memory cap refuses it like any other allocation, naming the Workspace category).
    memory_ledger().on_alloc(device_, MemoryCategory::Workspace, static_cast<int64_t>(kWorkspaceBytes));
    try {
      workspace_ = cuda_allocator().allocate(kWorkspaceBytes);
      ZDL_CUBLAS_CHECK(cublasLtCreate(&lt_));
    } catch (...) {
      if (workspace_) {
        try {
          cuda_allocator().deallocate(workspace_, kWorkspaceBytes);
        } catch (...) {
        }
      }
      memory_ledger().on_free(device_, MemoryCategory::Workspace, static_cast<int64_t>(kWorkspaceBytes));
      throw;
    }
  }
  GemmContext(const GemmContext&) = delete;
  GemmContext& operator=(const GemmContext&) = delete;
  ~GemmContext() {
    plans_.clear();
    if (blas_) cublasDestroy(blas_);
    cublasLtDestroy(lt_);
    try {
      cuda_allocator().deallocate(workspace_, kWorkspaceBytes);  // stream-ordered: after pending GEMMs
    } catch (...) {
      // At process exit the CUDA runtime may already be gone; nothing left to free then.
    }
    memory_ledger().on_free(device_, MemoryCategory::Workspace, static_cast<int64_t>(kWorkspaceBytes));
  }

  cublasLtHandle_t lt() const { return lt_; }
  void* workspace() const { return workspace_; }

  // Classic cuBLAS, created on first use (the fallback path), on the compute stream and workspace.
  cublasHandle_t blas() {
    if (!blas_) {
      ZDL_CUBLAS_CHECK(cublasCreate(&blas_));
      ZDL_CUBLAS_CHECK(cublasSetWorkspace(blas_, workspace_, kWorkspaceBytes));
    }
    ZDL_CUBLAS_CHECK(cublasSetStream(blas_, compute_stream()));
    return blas_;
  }

  const Plan& plan(const PlanKey& key, const void* bias) {
    auto it = plans_.find(key);
    if (it != plans_.end()) return *it->second;
    if (plans_.size() >= kMaxPlans) plans_.clear();
    auto p = build_plan(key, bias);
    return *plans_.emplace(key, std::move(p)).first->second;
  }

 private:
  std::unique_ptr<Plan> build_plan(const PlanKey& k, const void* bias) {
    auto p = std::make_unique<Plan>();
    const cudaDataType_t t = cuda_type(k.dtype);
    ZDL_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const int32_t op_a = k.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is our B
    const int32_t op_b = k.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's B is our A
    ZDL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
    ZDL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
    if (k.bias) {
      const uint32_t epilogue = CUBLASLT_EPILOGUE_BIAS;
      ZDL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
      // The heuristic reads the bias pointer's alignment from here (the pointer is set again per call).
      ZDL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    }
    // Stored (column-major) shapes; see [Note: row-major on a column-major library].
    ZDL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lt_a, t, k.trans_b ? k.K : k.N, k.trans_b ? k.N : k.K, k.ldb));
    ZDL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lt_b, t, k.trans_a ? k.M : k.K, k.trans_a ? k.K : k.M, k.lda));
    ZDL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lt_c, t, k.N, k.M, k.ldc));
    if (k.batch > 1) {
      const int32_t count = static_cast<int32_t>(k.batch);
      auto set_batch = [&](cublasLtMatrixLayout_t l, int64_t stride) {
        ZDL_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
        ZDL_CUBLAS_CHECK(
            cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
      };
      set_batch(p->lt_a, k.stride_b);
      set_batch(p->lt_b, k.stride_a);
      set_batch(p->lt_c, k.stride_c);
    }

    cublasLtMatmulPreference_t pref = nullptr;
    ZDL_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    struct PrefGuard {
      cublasLtMatmulPreference_t p;
      ~PrefGuard() { cublasLtMatmulPreferenceDestroy(p); }
    } guard{pref};
    const uint64_t ws = kWorkspaceBytes;
    // Split-K only with partial sums kept in f32 in the workspace: never summed in bf16
    // (INPLACE, OUTPUT_TYPE reduce in the output type), so bf16 results round once.
    const uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    ZDL_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    ZDL_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction, sizeof reduction));
    ZDL_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &k.align_b,
                                                          sizeof k.align_b));
    ZDL_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &k.align_a,
                                                          sizeof k.align_a));
    ZDL_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &k.align_c,
                                                          sizeof k.align_c));
    ZDL_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &k.align_c,
                                                          sizeof k.align_c));

    cublasLtMatmulHeuristicResult_t result{};
    int returned = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt_, p->desc, p->lt_a, p->lt_b, p->lt_c, p->lt_c, pref, 1,
                                                       &result, &returned);
    // Any failure here means "no cuBLASLt algorithm for this problem" (the arguments were checked
    // already): classic cuBLAS takes it, and reports its own error if it cannot either.
    if (st == CUBLAS_STATUS_SUCCESS && returned > 0 && result.state == CUBLAS_STATUS_SUCCESS &&
        result.workspaceSize <= kWorkspaceBytes) {
      p->algo = result.algo;
      p->use_lt = true;
    }
    return p;
  }

  Device device_;
  cublasLtHandle_t lt_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  void* workspace_ = nullptr;
  std::map<PlanKey, std::unique_ptr<Plan>> plans_;
};

GemmContext& context() { return thread_device_context<GemmContext>(); }

void check_args(DType dtype, int64_t batch, int64_t M, int64_t N, int64_t K, bool trans_a, int64_t lda, bool trans_b,
                int64_t ldb, int64_t ldc, int64_t stride_c) {
  (void)cuda_type(dtype);
  ZDL_CHECK(M >= 0 && N >= 0 && K >= 0 && batch >= 0, "cuda gemm: negative size batch=", batch, " M=", M, " N=", N,
            " K=", K);
  // Leading dimensions must cover a stored row, as on the CPU (kernels/cpu/matmul.cpp).
  ZDL_CHECK(lda >= (trans_a ? M : K) && lda >= 1, "cuda gemm: lda=", lda, " too small for A ",
            trans_a ? "[K,M]=[" : "[M,K]=[", trans_a ? K : M, ",", trans_a ? M : K, "]");
  ZDL_CHECK(ldb >= (trans_b ? K : N) && ldb >= 1, "cuda gemm: ldb=", ldb, " too small for B ",
            trans_b ? "[N,K]=[" : "[K,N]=[", trans_b ? N : K, ",", trans_b ? K : N, "]");
  ZDL_CHECK(ldc >= N && ldc >= 1, "cuda gemm: ldc=", ldc, " too small for C [M,N]=[", M, ",", N, "]");
  ZDL_CHECK(batch <= 1 || stride_c != 0, "cuda gemm_batched: stride_c == 0 with batch ", batch,
            " would race; fold the batch into K to sum products");
  for (int64_t v : {batch, M, N, K, lda, ldb, ldc})
    ZDL_CHECK(v <= INT_MAX, "cuda gemm: size ", v, " exceeds cuBLAS's int32 limit (batch=", batch, " M=", M, " N=", N,
              " K=", K, " lda=", lda, " ldb=", ldb, " ldc=", ldc, ")");
}

// C[M, N] (row-major, leading dim ldc) = bias in every row.
template <class T>
__global__ void bias_rows_kernel(int64_t M, int64_t N, const T* bias, T* c, int64_t ldc) {
  ZDL_GRID_STRIDE(i, M * N) c[(i / N) * ldc + i % N] = bias[i % N];
}

void write_bias_rows(DType dtype, int64_t M, int64_t N, const void* bias, void* c, int64_t ldc) {
  auto run = [&](auto tag) {
    using T = decltype(tag);
    bias_rows_kernel<T><<<grid_for(M * N), kBlock, 0, compute_stream()>>>(M, N, static_cast<const T*>(bias),
                                                                          static_cast<T*>(c), ldc);
    ZDL_CUDA_CHECK_LAUNCH();
  };
  ZDL_CUDA_DISPATCH_FLOAT(dtype, "cuda gemm bias", run);
}

// C = 0 for each of `batch` [M, N] matrices (leading dim ldc, batch stride stride_c).
void zero_matrices(DType dtype, int64_t batch, int64_t M, int64_t N, void* c, int64_t ldc, int64_t stride_c) {
  const size_t es = element_size(dtype);
  for (int64_t i = 0; i < batch; ++i)
    ZDL_CUDA_CHECK(cudaMemset2DAsync(static_cast<char*>(c) + static_cast<size_t>(i * stride_c) * es, ldc * es, 0,
                                     N * es, M, compute_stream()));
}

// One product (strided batch), bias optional (batch == 1 only). Sizes are non-zero here.
void run_product(DType dtype, int64_t batch, int64_t M, int64_t N, int64_t K, bool trans_a, const void* a, int64_t lda,
                 int64_t stride_a, bool trans_b, const void* b, int64_t ldb, int64_t stride_b, void* c, int64_t ldc,
                 int64_t stride_c, bool accumulate, const void* bias) {
  GemmContext& ctx = context();
  if (batch == 1) stride_a = stride_b = stride_c = 0;  // unused; keeps one plan per problem
  const size_t es = element_size(dtype);
  PlanKey key{dtype,   batch,    M,        N,        K,    trans_a,        trans_b,        lda,
              ldb,     ldc,      stride_a, stride_b, stride_c, bias != nullptr, batch_alignment(a, batch, stride_a, es),
              batch_alignment(b, batch, stride_b, es), batch_alignment(c, batch, stride_c, es),
              bias ? alignment_of(bias) : 0u};
  const Plan& plan = ctx.plan(key, bias);
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  if (!plan.use_lt) {
    if (bias) {  // no fused algorithm: bias rows first, then accumulate the product onto them
      write_bias_rows(dtype, M, N, bias, c, ldc);
      return run_product(dtype, batch, M, N, K, trans_a, a, lda, stride_a, trans_b, b, ldb, stride_b, c, ldc, stride_c,
                         /*accumulate=*/true, nullptr);
    }
    const cudaDataType_t t = cuda_type(dtype);
    ZDL_CUBLAS_CHECK(cublasGemmStridedBatchedEx(ctx.blas(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                                trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(N),
                                                static_cast<int>(M), static_cast<int>(K), &alpha, b, t,
                                                static_cast<int>(ldb), stride_b, a, t, static_cast<int>(lda), stride_a,
                                                &beta, c, t, static_cast<int>(ldc), stride_c, static_cast<int>(batch),
                                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return;
  }
  if (bias)  // the plan is per thread, so setting the pointer here cannot race
    ZDL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  ZDL_CUBLAS_CHECK(cublasLtMatmul(ctx.lt(), plan.desc, &alpha, b, plan.lt_a, a, plan.lt_b, &beta, c, plan.lt_c, c,
                                  plan.lt_c, &plan.algo, ctx.workspace(), kWorkspaceBytes, compute_stream()));
}

void gemm_any(DType dtype, int64_t batch, int64_t M, int64_t N, int64_t K, bool trans_a, const void* a, int64_t lda,
              int64_t stride_a, bool trans_b, const void* b, int64_t ldb, int64_t stride_b, void* c, int64_t ldc,
              int64_t stride_c, bool accumulate, const void* bias) {
  check_args(dtype, batch, M, N, K, trans_a, lda, trans_b, ldb, ldc, stride_c);
  if (batch == 0 || M == 0 || N == 0) return;
  if (K == 0) {  // empty inner dimension: the product is zero
    if (bias) write_bias_rows(dtype, M, N, bias, c, ldc);
    else if (!accumulate) zero_matrices(dtype, batch, M, N, c, ldc, stride_c);
    return;
  }
  if (batch > 1 && (stride_a == 0 || stride_b == 0)) {
    // A shared operand (batch stride 0): one product per matrix, so no stride-0 batch layouts
    // reach cuBLASLt. (The differentiable matmul folds a shared 2-D b into rows instead.)
    const size_t es = element_size(dtype);
    for (int64_t i = 0; i < batch; ++i)
      run_product(dtype, 1, M, N, K, trans_a, static_cast<const char*>(a) + static_cast<size_t>(i * stride_a) * es, lda,
                  0, trans_b, static_cast<const char*>(b) + static_cast<size_t>(i * stride_b) * es, ldb, 0,
                  static_cast<char*>(c) + static_cast<size_t>(i * stride_c) * es, ldc, 0, accumulate, nullptr);
    return;
  }
  run_product(dtype, batch, M, N, K, trans_a, a, lda, stride_a, trans_b, b, ldb, stride_b, c, ldc, stride_c, accumulate,
              bias);
}

}  // namespace

void gemm(DType dtype, int64_t M, int64_t N, int64_t K, bool trans_a, const void* a, int64_t lda, bool trans_b,
          const void* b, int64_t ldb, void* c, int64_t ldc, bool accumulate) {
  gemm_any(dtype, 1, M, N, K, trans_a, a, lda, 0, trans_b, b, ldb, 0, c, ldc, 0, accumulate, nullptr);
}

void gemm_batched(DType dtype, int64_t batch, int64_t M, int64_t N, int64_t K, bool trans_a, const void* a,
                  int64_t lda, int64_t stride_a, bool trans_b, const void* b, int64_t ldb, int64_t stride_b, void* c,
                  int64_t ldc, int64_t stride_c, bool accumulate) {
  gemm_any(dtype, batch, M, N, K, trans_a, a, lda, stride_a, trans_b, b, ldb, stride_b, c, ldc, stride_c, accumulate,
           nullptr);
}

void gemm_bias(DType dtype, int64_t M, int64_t N, int64_t K, bool trans_a, const void* a, int64_t lda, bool trans_b,
               const void* b, int64_t ldb, const void* bias, void* c, int64_t ldc) {
  ZDL_CHECK(bias != nullptr || M * N == 0, "cuda gemm_bias: null bias");
  if (alignment_of(bias) < 16) {  // the fused epilogue wants a 16-byte aligned bias vector
    check_args(dtype, 1, M, N, K, trans_a, lda, trans_b, ldb, ldc, 0);
    if (M == 0 || N == 0) return;
    write_bias_rows(dtype, M, N, bias, c, ldc);
    return gemm_any(dtype, 1, M, N, K, trans_a, a, lda, 0, trans_b, b, ldb, 0, c, ldc, 0, /*accumulate=*/true, nullptr);
  }
  gemm_any(dtype, 1, M, N, K, trans_a, a, lda, 0, trans_b, b, ldb, 0, c, ldc, 0, /*accumulate=*/false, bias);
}

}  // namespace zdl::kernels::cuda

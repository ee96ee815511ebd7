// Matrix products on CUDA through cuBLASLt (see matmul.h for the conventions).
//
// [Note: row-major on a column-major library] A row-major [R, C] buffer with leading dimension
// ld is, read column-major, the matrix [C, R] with the same ld, i.e. its transpose. So row-major
// C[M,N] = op(A) op(B) is the column-major product C^T[N,M] = op(B)^T op(A)^T, and:
//   cuBLASLt A := our B buffer: stored col-major [N, K] (op N) or, when trans_b, [K, N] (op T)
//   cuBLASLt B := our A buffer: stored col-major [K, M] (op N) or, when trans_a, [M, K] (op T)
//   cuBLASLt C = D := our C buffer: col-major [N, M], ld = ldc;  m = N, n = M, k = K.
// The bias of CUBLASLT_EPILOGUE_BIAS has one value per row of D, i.e. per column of our C:
// exactly linear's bias over output features, broadcast over our rows. The same holds for the
// GELU epilogues: their auxiliary matrix (the GELU's input) has D's layout, and the bias
// gradient of DGELU_BGRAD sums D's columns, i.e. our C's rows, one value per output feature.
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
#include <atomic>
#include <climits>
#include <cstdlib>
#include <string>
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

// What cuBLASLt does to the product before it is stored (batch == 1 only, except None).
enum class Epilogue : uint8_t {
  None,
  Bias,         // D = AB + bias
  GeluAuxBias,  // aux = AB + bias, D = gelu(aux)
  DGeluBGrad,   // D = gelu'(aux) * AB, bias = column sums of D (an output)
};

struct EpilogueArgs {
  Epilogue kind = Epilogue::None;
  const void* bias = nullptr;  // an output for DGeluBGrad
  void* aux = nullptr;         // written by GeluAuxBias, read by DGeluBGrad
  int64_t ld_aux = 0;
};

struct PlanKey {
  DType dtype;
  int64_t batch, M, N, K;
  bool trans_a, trans_b;
  int64_t lda, ldb, ldc, stride_a, stride_b, stride_c;
  Epilogue epilogue;
  int64_t ld_aux;
  uint32_t align_a, align_b, align_c, align_bias, align_aux;

  auto tie() const {
    return std::tie(dtype, batch, M, N, K, trans_a, trans_b, lda, ldb, ldc, stride_a, stride_b, stride_c, epilogue,
                    ld_aux, align_a, align_b, align_c, align_bias, align_aux);
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

// The per-call pointers of an epilogue (the plan is per thread, so setting them cannot race).
void set_epilogue_pointers(cublasLtMatmulDesc_t desc, const EpilogueArgs& e) {
  if (e.kind == Epilogue::None) return;
  ZDL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &e.bias, sizeof e.bias));
  if (e.kind == Epilogue::Bias) return;
  ZDL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &e.aux, sizeof e.aux));
  ZDL_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &e.ld_aux, sizeof e.ld_aux));
}

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

  const Plan& plan(const PlanKey& key, const EpilogueArgs& e) {
    auto it = plans_.find(key);
    if (it != plans_.end()) return *it->second;
    if (plans_.size() >= kMaxPlans) plans_.clear();
    auto p = build_plan(key, e);
    return *plans_.emplace(key, std::move(p)).first->second;
  }

 private:
  std::unique_ptr<Plan> build_plan(const PlanKey& k, const EpilogueArgs& e) {
    auto p = std::make_unique<Plan>();
    const cudaDataType_t t = cuda_type(k.dtype);
    ZDL_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const int32_t op_a = k.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is our B
    const int32_t op_b = k.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's B is our A
    ZDL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
    ZDL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
    if (k.epilogue != Epilogue::None) {
      const uint32_t epilogue = k.epilogue == Epilogue::Bias          ? CUBLASLT_EPILOGUE_BIAS
                                : k.epilogue == Epilogue::GeluAuxBias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                                                      : CUBLASLT_EPILOGUE_DGELU_BGRAD;
      ZDL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
      // The heuristic reads the pointers' alignment from here (they are set again per call).
      set_epilogue_pointers(p->desc, e);
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

// One product (strided batch), an epilogue only with batch == 1. Sizes are non-zero here.
// False only for a GELU epilogue cuBLASLt has no algorithm for (nothing was written).
bool run_product(DType dtype, int64_t batch, int64_t M, int64_t N, int64_t K, bool trans_a, const void* a, int64_t lda,
                 int64_t stride_a, bool trans_b, const void* b, int64_t ldb, int64_t stride_b, void* c, int64_t ldc,
                 int64_t stride_c, bool accumulate, const EpilogueArgs& e) {
  GemmContext& ctx = context();
  if (batch == 1) stride_a = stride_b = stride_c = 0;  // unused; keeps one plan per problem
  const size_t es = element_size(dtype);
  const bool gelu = e.kind == Epilogue::GeluAuxBias || e.kind == Epilogue::DGeluBGrad;
  PlanKey key{dtype,
              batch,
              M,
              N,
              K,
              trans_a,
              trans_b,
              lda,
              ldb,
              ldc,
              stride_a,
              stride_b,
              stride_c,
              e.kind,
              gelu ? e.ld_aux : 0,
              batch_alignment(a, batch, stride_a, es),
              batch_alignment(b, batch, stride_b, es),
              batch_alignment(c, batch, stride_c, es),
              e.bias ? alignment_of(e.bias) : 0u,
              gelu ? alignment_of(e.aux) : 0u};
  const Plan& plan = ctx.plan(key, e);
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  if (!plan.use_lt) {
    if (gelu) return false;
    if (e.kind == Epilogue::Bias) {  // no fused algorithm: bias rows first, then accumulate the product onto them
      write_bias_rows(dtype, M, N, e.bias, c, ldc);
      return run_product(dtype, batch, M, N, K, trans_a, a, lda, stride_a, trans_b, b, ldb, stride_b, c, ldc, stride_c,
                         /*accumulate=*/true, EpilogueArgs{});
    }
    const cudaDataType_t t = cuda_type(dtype);
    ZDL_CUBLAS_CHECK(cublasGemmStridedBatchedEx(ctx.blas(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                                trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(N),
                                                static_cast<int>(M), static_cast<int>(K), &alpha, b, t,
                                                static_cast<int>(ldb), stride_b, a, t, static_cast<int>(lda), stride_a,
                                                &beta, c, t, static_cast<int>(ldc), stride_c, static_cast<int>(batch),
                                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return true;
  }
  set_epilogue_pointers(plan.desc, e);
  ZDL_CUBLAS_CHECK(cublasLtMatmul(ctx.lt(), plan.desc, &alpha, b, plan.lt_a, a, plan.lt_b, &beta, c, plan.lt_c, c,
                                  plan.lt_c, &plan.algo, ctx.workspace(), kWorkspaceBytes, compute_stream()));
  return true;
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
                  static_cast<char*>(c) + static_cast<size_t>(i * stride_c) * es, ldc, 0, accumulate, EpilogueArgs{});
    return;
  }
  run_product(dtype, batch, M, N, K, trans_a, a, lda, stride_a, trans_b, b, ldb, stride_b, c, ldc, stride_c, accumulate,
              bias ? EpilogueArgs{.kind = Epilogue::Bias, .bias = bias} : EpilogueArgs{});
}

// The GELU epilogues' conditions that the heuristic does not check itself: bf16 (f32 keeps
// the CPU's formula to 1e-6, the epilogue's GELU need not), a 16-byte aligned bias and
// auxiliary matrix whose leading dimension is a multiple of 8 (cuBLASLt's rule for aux).
bool gelu_epilogue_allowed(DType dtype, const void* bias, const void* aux, int64_t ld_aux) {
  static const bool enabled = [] {
    const char* v = std::getenv("ZDL_CUDA_GELU_EPILOGUE");
    return v == nullptr || std::string(v) != "0";
  }();
  return enabled && dtype == DType::BF16 && alignment_of(bias) >= 16 && alignment_of(aux) >= 16 && ld_aux % 8 == 0;
}

std::atomic<int64_t> g_gelu_epilogues{0};

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

bool gemm_bias_gelu(DType dtype, int64_t M, int64_t N, int64_t K, bool trans_a, const void* a, int64_t lda, bool trans_b,
                    const void* b, int64_t ldb, const void* bias, void* c, int64_t ldc, void* pre, int64_t ldpre) {
  check_args(dtype, 1, M, N, K, trans_a, lda, trans_b, ldb, ldc, 0);
  ZDL_CHECK(ldpre >= N, "cuda gemm_bias_gelu: ldpre=", ldpre, " too small for [M,N]=[", M, ",", N, "]");
  if (M == 0 || N == 0 || K == 0 || !gelu_epilogue_allowed(dtype, bias, pre, ldpre)) return false;
  const bool done = run_product(dtype, 1, M, N, K, trans_a, a, lda, 0, trans_b, b, ldb, 0, c, ldc, 0, false,
                                EpilogueArgs{.kind = Epilogue::GeluAuxBias, .bias = bias, .aux = pre, .ld_aux = ldpre});
  if (done) g_gelu_epilogues.fetch_add(1, std::memory_order_relaxed);
  return done;
}

bool gemm_dgelu_bgrad(DType dtype, int64_t M, int64_t N, int64_t K, bool trans_a, const void* a, int64_t lda,
                      bool trans_b, const void* b, int64_t ldb, const void* pre, int64_t ldpre, void* dpre,
                      int64_t lddpre, void* dbias) {
  check_args(dtype, 1, M, N, K, trans_a, lda, trans_b, ldb, lddpre, 0);
  ZDL_CHECK(ldpre >= N, "cuda gemm_dgelu_bgrad: ldpre=", ldpre, " too small for [M,N]=[", M, ",", N, "]");
  if (M == 0 || N == 0 || K == 0 || !gelu_epilogue_allowed(dtype, dbias, pre, ldpre)) return false;
  const bool done =
      run_product(dtype, 1, M, N, K, trans_a, a, lda, 0, trans_b, b, ldb, 0, dpre, lddpre, 0, false,
                  EpilogueArgs{.kind = Epilogue::DGeluBGrad, .bias = dbias, .aux = const_cast<void*>(pre), .ld_aux = ldpre});
  if (done) g_gelu_epilogues.fetch_add(1, std::memory_order_relaxed);
  return done;
}

int64_t gelu_epilogue_calls() { return g_gelu_epilogues.load(std::memory_order_relaxed); }

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

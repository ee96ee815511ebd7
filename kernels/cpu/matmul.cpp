#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <type_traits>
#include <vector>

#include <omp.h>

#ifndef ZDL_WITH_ONEDNN
#define ZDL_WITH_ONEDNN 0
#endif
#ifndef ZDL_WITH_ONEDNN_BF16
#define ZDL_WITH_ONEDNN_BF16 0
#endif
#if ZDL_WITH_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

#include "core/check.h"
#include "kernels/cpu/compute_type.h"
#include "kernels/cpu/eigen.h"
#include "kernels/cpu/gemm_blocked.h"
#include "kernels/cpu/parallel.h"

namespace zdl::kernels::cpu {

namespace {

// Read-only views of a strided buffer as an Eigen matrix. A row-major [R, C] buffer with
// leading dimension ld is, read the other way, a column-major [C, R] matrix with the same
// outer stride: that is how op(X) = X^T is formed without moving a byte.
template <class T>
using RowMajorView = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>,
                                Eigen::Unaligned, Eigen::OuterStride<>>;
template <class T>
using ColMajorView = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>,
                                Eigen::Unaligned, Eigen::OuterStride<>>;
template <class T>
using RowMajorOut =
    Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, Eigen::Unaligned, Eigen::OuterStride<>>;

// Products smaller than this (M*N*K) gain nothing from Eigen's own threading (its heuristic
// gives each thread at least ~50k multiply-adds), so a batch of them is split over threads.
constexpr int64_t kSmallProduct = int64_t{1} << 18;

// Whether f32 products run on zerodl's own kernel, and on which instance.
bool own_kernel(GemmIsa& isa) {
  const GemmBackend b = gemm_backend();
  if (b != GemmBackend::Avx2 && b != GemmBackend::Avx512) return false;
  isa = b == GemmBackend::Avx512 ? GemmIsa::Avx512 : GemmIsa::Avx2;
  return true;
}

// Sets this thread's OpenMP thread count to 1 for its lifetime, so that Eigen and oneDNN, which
// read it, start no team of their own inside a product that is already one thread's share.
class OneThreadScope {
 public:
  OneThreadScope() : saved_(omp_get_max_threads()) {
    if (saved_ > 1) omp_set_num_threads(1);
  }
  ~OneThreadScope() {
    if (saved_ > 1) omp_set_num_threads(saved_);
  }
  OneThreadScope(const OneThreadScope&) = delete;
  OneThreadScope& operator=(const OneThreadScope&) = delete;

 private:
  int saved_;
};

void check_dims(int64_t M, int64_t N, int64_t K, bool trans_a, int64_t lda, bool trans_b, int64_t ldb, int64_t ldc) {
  ZDL_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm: negative size M=", M, " N=", N, " K=", K);
  // Leading dimensions must cover a stored row: A is [M,K] (or [K,M] when transposed), etc.
  ZDL_CHECK(lda >= (trans_a ? M : K) && lda >= 1, "gemm: lda=", lda, " too small for A ", trans_a ? "[K,M]=[" : "[M,K]=[",
            trans_a ? K : M, ",", trans_a ? M : K, "]");
  ZDL_CHECK(ldb >= (trans_b ? K : N) && ldb >= 1, "gemm: ldb=", ldb, " too small for B ", trans_b ? "[N,K]=[" : "[K,N]=[",
            trans_b ? N : K, ",", trans_b ? K : N, "]");
  ZDL_CHECK(ldc >= N && ldc >= 1, "gemm: ldc=", ldc, " too small for C [M,N]=[", M, ",", N, "]");
}

// One Eigen product, on the calling thread only (see gemm_unchecked).
template <class T>
void eigen_product(int64_t M, int64_t N, int64_t K, bool trans_a, const T* a, int64_t lda, bool trans_b, const T* b,
                   int64_t ldb, T* c, int64_t ldc, bool accumulate) {
  RowMajorOut<T> C(c, M, N, Eigen::OuterStride<>(ldc));
  if (K == 0) {
    if (!accumulate) C.setZero();
    return;
  }
  auto run = [&](const auto& A, const auto& B) {
    if (accumulate) C.noalias() += A * B;
    else C.noalias() = A * B;
  };
  // op(A) is [M, K]: stored row-major as is, or as its row-major transpose [K, M].
  auto with_a = [&](const auto& A) {
    if (trans_b) run(A, ColMajorView<T>(b, K, N, Eigen::OuterStride<>(ldb)));
    else run(A, RowMajorView<T>(b, K, N, Eigen::OuterStride<>(ldb)));
  };
  if (trans_a) with_a(ColMajorView<T>(a, M, K, Eigen::OuterStride<>(lda)));
  else with_a(RowMajorView<T>(a, M, K, Eigen::OuterStride<>(lda)));
}

// One product on the calling thread: for f32 the chosen back end's (zerodl's kernel, or
// oneDNN's sgemm, a JIT kernel for the CPU it runs on that starts no threads of its own here,
// since every caller has set this thread's OpenMP thread count to 1), Eigen's otherwise and
// for f64.
template <class T>
void tile_product(int64_t M, int64_t N, int64_t K, bool trans_a, const T* a, int64_t lda, bool trans_b, const T* b,
                  int64_t ldb, T* c, int64_t ldc, bool accumulate) {
  if constexpr (std::is_same_v<T, float>) {
    GemmIsa isa;
    if (own_kernel(isa)) {
      gemm_blocked(isa, M, N, K, trans_a, a, lda, trans_b, b, ldb, c, ldc, accumulate);
      return;
    }
  }
#if ZDL_WITH_ONEDNN
  if constexpr (std::is_same_v<T, float>) {
    if (gemm_backend() == GemmBackend::OneDnn && K > 0) {
      const dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, 1.0f, a, lda, b, ldb,
                                          accumulate ? 1.0f : 0.0f, c, ldc);
      ZDL_CHECK(st == dnnl_success, "gemm: oneDNN sgemm failed (status ", static_cast<int>(st), ") for M=", M,
                " N=", N, " K=", K);
      return;
    }
  }
#endif
  eigen_product(M, N, K, trans_a, a, lda, trans_b, b, ldb, c, ldc, accumulate);
}

#if ZDL_WITH_ONEDNN_BF16
// oneDNN's bf16 GEMM, row-major like dnnl_sgemm: exported by the library but declared only in
// its own tests (cmake/ZdlOneDnn.cmake checks that it links).
extern "C" dnnl_status_t dnnl_gemm_bf16bf16f32(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N, dnnl_dim_t K,
                                               float alpha, const uint16_t* A, dnnl_dim_t lda, const uint16_t* B,
                                               dnnl_dim_t ldb, float beta, float* C, dnnl_dim_t ldc);

// Whether oneDNN's bf16 GEMM runs on bf16 dot products here: the CPU has them (elsewhere oneDNN
// would emulate them), and oneDNN's instruction set reaches them (ONEDNN_MAX_CPU_ISA can cap it
// lower, and capped below AVX-512 its bf16 GEMM fails: unimplemented).
bool onednn_bf16_dots() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx512bf16") &&
         (dnnl_get_effective_cpu_isa() & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
#else
  return false;
#endif
}
#endif

// Where bf16 products run: on oneDNN's bf16 GEMM when oneDNN is the back end and both the CPU and
// oneDNN's instruction set (ONEDNN_MAX_CPU_ISA) reach bf16 dot products (elsewhere oneDNN would
// emulate them, or fail); else on zerodl's kernel, the instance in use, or the AVX2 one (the
// AVX-512 instance, the same bits, runs only where chosen, as for f32); else nowhere (bf16
// products then compute in f32 through autograd). Decided by the CPU, the back end and the
// environment only, as the f32 back end is, so every rank of a job on one machine type rounds the
// same.
enum class Bf16Gemm { OneDnn, Own, None };
Bf16Gemm bf16_gemm(GemmIsa& isa) {
#if ZDL_WITH_ONEDNN_BF16
  static const bool dots = onednn_bf16_dots();
#else
  static const bool dots = false;
#endif
  if (dots && gemm_backend() == GemmBackend::OneDnn) return Bf16Gemm::OneDnn;
  if (own_kernel(isa)) return Bf16Gemm::Own;
  if (!gemm_blocked_supported(GemmIsa::Avx2)) return Bf16Gemm::None;
  isa = GemmIsa::Avx2;
  return Bf16Gemm::Own;
}

// bf16 operands, f32 result (only called where gemm_bf16_available()).
void tile_product(int64_t M, int64_t N, int64_t K, bool trans_a, const BFloat16* a, int64_t lda, bool trans_b,
                  const BFloat16* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  GemmIsa isa;
  if (bf16_gemm(isa) == Bf16Gemm::Own) {
    gemm_blocked(isa, M, N, K, trans_a, a, lda, trans_b, b, ldb, c, ldc, accumulate);
    return;
  }
#if ZDL_WITH_ONEDNN_BF16
  static_assert(sizeof(BFloat16) == sizeof(uint16_t));
  const dnnl_status_t st =
      dnnl_gemm_bf16bf16f32(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, 1.0f, reinterpret_cast<const uint16_t*>(a),
                            lda, reinterpret_cast<const uint16_t*>(b), ldb, accumulate ? 1.0f : 0.0f, c, ldc);
  ZDL_CHECK(st == dnnl_success, "gemm: oneDNN bf16 GEMM failed (status ", static_cast<int>(st), ") for M=", M,
            " N=", N, " K=", K);
#else
  ZDL_CHECK(false, "gemm: bf16 GEMM called in a build without oneDNN's bf16 GEMM");
#endif
}

// bf16 operands and result: the sums in f32 (on top of c's values when accumulating), in a
// scratch of this thread's, rounded to bf16 once on the way out, kBf16Rows x kBf16Cols at a
// time: the scratch stays at most 1 MiB whatever the shape (a 50k vocabulary's head, or its
// weight gradient of 50k rows on one thread, included), and the f32 values are rounded while
// still in cache, instead of a full-size f32 result and a pass over it. The split depends on the
// shape only, and none of the back ends rounds differently for it (oneDNN's tiles have at most
// 256 rows already; zerodl's kernel's bits depend on K alone).
constexpr int64_t kBf16Rows = 256, kBf16Cols = 1024;
void tile_product(int64_t M, int64_t N, int64_t K, bool trans_a, const BFloat16* a, int64_t lda, bool trans_b,
                  const BFloat16* b, int64_t ldb, BFloat16* c, int64_t ldc, bool accumulate) {
  thread_local std::vector<float> sums;
  for (int64_t m0 = 0; m0 < M; m0 += kBf16Rows) {
    const int64_t mm = std::min(kBf16Rows, M - m0);
    const BFloat16* am = trans_a ? a + m0 : a + m0 * lda;
    for (int64_t n0 = 0; n0 < N; n0 += kBf16Cols) {
      const int64_t nn = std::min(kBf16Cols, N - n0);
      sums.resize(static_cast<size_t>(mm * nn));
      BFloat16* cc = c + m0 * ldc + n0;
      if (accumulate)
        for (int64_t m = 0; m < mm; ++m)
          for (int64_t n = 0; n < nn; ++n) sums[m * nn + n] = static_cast<float>(cc[m * ldc + n]);
      tile_product(mm, nn, K, trans_a, am, lda, trans_b, trans_b ? b + n0 * ldb : b + n0, ldb, sums.data(), nn,
                   accumulate);
      for (int64_t m = 0; m < mm; ++m) store_compute(nn, sums.data() + m * nn, cc + m * ldc);
    }
  }
}

// [Note: thread-count invariance] Eigen's own threading re-derives its blocking of K from the
// thread count, so the same product rounds differently on 1 and 2 threads, and a rank's result
// would depend on how many cores it was given. Instead C is cut into tiles chosen from the
// shape alone; each tile is one single-threaded product (Eigen's K blocking depends on K and
// the cache sizes only; oneDNN's kernel on the shape and the CPU), and threads take whole
// tiles. Every element is then summed in the same order whatever the thread count, which
// bit-identical training across world sizes relies on (docs/exactness.md).
constexpr int64_t kTileRows = 256, kMinTileCols = 64, kWantTiles = 8;

// zerodl's kernel needs no tiles chosen from the shape: its bits depend on K alone
// (gemm_blocked.h). So each thread takes an equal share of C's rows at full width, one product
// (rows(m0, m1) computes rows [m0, m1)), instead of the tiles below, which are as narrow as 64
// columns where a weight gradient has few rows, and each pack their panels again (the twelve
// products of a GPT step at C = 256 and B*T = 1024, 2 threads, AVX2: 30.7 ms against the tiles'
// 33.2). Products too small to share, or with too few rows for every thread, return false and
// take the tiles.
template <class Rows>
bool rows_per_thread(GemmIsa isa, int64_t M, int64_t N, int64_t K, const Rows& rows) {
  const int threads = omp_in_parallel() || M * N * K < kSmallProduct ? 1 : omp_get_max_threads();
  if (threads == 1) {
    rows(0, M);
    return true;
  }
  // Whole register blocks of rows per thread, at least 4 each.
  const int64_t block = gemm_blocked_rows(isa), blocks = (M + block - 1) / block;
  if (blocks < 4 * threads) return false;
  const int64_t per = (blocks + threads - 1) / threads * block;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int t = 0; t < threads; ++t) {
    const int64_t m0 = t * per, m1 = std::min(M, m0 + per);
    if (m0 < m1) rows(m0, m1);
  }
  return true;
}

template <class T>
void gemm_unchecked(int64_t M, int64_t N, int64_t K, bool trans_a, const T* a, int64_t lda, bool trans_b, const T* b,
                    int64_t ldb, T* c, int64_t ldc, bool accumulate) {
  if (M == 0 || N == 0) return;
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, BFloat16>) {
    GemmIsa isa;
    bool own;
    if constexpr (std::is_same_v<T, float>) own = own_kernel(isa);
    else own = bf16_gemm(isa) == Bf16Gemm::Own;
    auto rows = [&](int64_t m0, int64_t m1) {
      tile_product(m1 - m0, N, K, trans_a, trans_a ? a + m0 : a + m0 * lda, lda, trans_b, b, ldb, c + m0 * ldc, ldc,
                   accumulate);
    };
    if (own && rows_per_thread(isa, M, N, K, rows)) return;
  }
  const int64_t tiles_m = (M + kTileRows - 1) / kTileRows;
  int64_t tiles_n = 1;
  if (tiles_m < kWantTiles && M * N * K >= kSmallProduct) {
    const int64_t most = std::max<int64_t>(1, N / kMinTileCols);
    tiles_n = std::min((kWantTiles + tiles_m - 1) / tiles_m, most);
    // An even number of tiles where one more column of them allows it: 2 or 4 threads then
    // share them evenly (9 tiles on 2 threads idle one for a ninth of the product).
    if ((tiles_m * tiles_n) % 2 == 1 && tiles_n > 1 && tiles_n < most) ++tiles_n;
  }
  // Tile widths in whole multiples of 16 columns: the AVX2 kernel's register block (any width
  // gives Eigen's and oneDNN's products the same bits).
  const int64_t tm = (M + tiles_m - 1) / tiles_m, tn = ((N + tiles_n - 1) / tiles_n + 15) / 16 * 16;
  auto tile = [&](int64_t i) {
    const int64_t m0 = (i / tiles_n) * tm, n0 = (i % tiles_n) * tn;
    const int64_t mm = std::min(tm, M - m0), nn = std::min(tn, N - n0);
    if (mm <= 0 || nn <= 0) return;
    const T* at = trans_a ? a + m0 : a + m0 * lda;
    const T* bt = trans_b ? b + n0 * ldb : b + n0;
    tile_product(mm, nn, K, trans_a, at, lda, trans_b, bt, ldb, c + m0 * ldc + n0, ldc, accumulate);
  };
  const int64_t tiles = tiles_m * tiles_n;
  const bool parallel = tiles > 1 && !omp_in_parallel() && omp_get_max_threads() > 1 && M * N * K >= kSmallProduct;
  if (!parallel) {
    OneThreadScope one;
    for (int64_t i = 0; i < tiles; ++i) tile(i);
    return;
  }
#pragma omp parallel
  {
    omp_set_num_threads(1);  // this thread's products stay single-threaded
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < tiles; ++i) tile(i);
  }
}

// gemm_batched's body, shared with gemm_bf16_batched.
template <class T>
void batched_products(int64_t batch, int64_t M, int64_t N, int64_t K, bool trans_a, const T* a, int64_t lda,
                      int64_t stride_a, bool trans_b, const T* b, int64_t ldb, int64_t stride_b, T* c, int64_t ldc,
                      int64_t stride_c, bool accumulate) {
  check_dims(M, N, K, trans_a, lda, trans_b, ldb, ldc);
  ZDL_CHECK(batch >= 0, "gemm_batched: negative batch ", batch);
  ZDL_CHECK(batch <= 1 || stride_c != 0, "gemm_batched: stride_c == 0 with batch ", batch,
            " would race; fold the batch into K to sum products");
  auto one = [&](int64_t i) {
    gemm_unchecked(M, N, K, trans_a, a + i * stride_a, lda, trans_b, b + i * stride_b, ldb, c + i * stride_c, ldc,
                   accumulate);
  };
  // Split the batch over threads when that balances (every thread gets the same number of
  // products, or many each) or when each product is too small to tile; otherwise run the
  // products one after another, each tiled over all threads.
  const int64_t nt = omp_get_max_threads();
  const int64_t work = M * N * K;
  const bool over_batch = batch > 1 && nt > 1 && !omp_in_parallel() && batch * work >= kSmallProduct / 4 &&
                          (batch % nt == 0 || batch >= 4 * nt || work < kSmallProduct);
  if (over_batch) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < batch; ++i) one(i);
  } else {
    for (int64_t i = 0; i < batch; ++i) one(i);
  }
}

// Whether the CPU has AVX-512 (F): where oneDNN's sgemm beats Eigen's. On AVX2-only CPUs Eigen's
// is faster (an AMD EPYC without AVX-512, one thread: Eigen 70-73 GFLOP/s at 256-2048, oneDNN
// 38-74; docs/cpu_performance.md). Decided by the CPU, never by timing, so every rank of a job on
// one machine type computes the same bits.
bool cpu_has_avx512() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

// Why back end b is not available here (for errors; b must be unavailable).
const char* unavailable_why(GemmBackend b) {
  return b == GemmBackend::OneDnn   ? "this build has no oneDNN (scripts/setup.sh installs libdnnl-dev; "
                                      "cmake/ZdlOneDnn.cmake finds it)"
         : b == GemmBackend::Avx512 ? "this CPU lacks AVX-512"
                                    : "this CPU lacks AVX2 or FMA";
}

// The default: ZDL_CPU_GEMM if set, else oneDNN where built and the CPU has AVX-512, else
// zerodl's AVX2 kernel where the CPU has AVX2 and FMA, else Eigen. (zerodl's AVX-512 instance is
// not the default anywhere until it is measured against oneDNN there: bench/run_train_step.sh.)
GemmBackend named_in_environment() {
  const char* env = std::getenv("ZDL_CPU_GEMM");
  if (env == nullptr || *env == '\0') {
    if (ZDL_WITH_ONEDNN && cpu_has_avx512()) return GemmBackend::OneDnn;
    return gemm_blocked_supported(GemmIsa::Avx2) ? GemmBackend::Avx2 : GemmBackend::Eigen;
  }
  try {
    return gemm_backend_named(env);
  } catch (const Error& e) {
    throw Error("ZDL_CPU_GEMM: " + without_code_location(e.what()));
  }
}
GemmBackend& current_backend() {
  static GemmBackend chosen = gemm_backend_from_environment();
  return chosen;
}

}  // namespace

GemmBackend gemm_backend_from_environment() {
  const GemmBackend b = named_in_environment();
  ZDL_CHECK(gemm_backend_available(b), "ZDL_CPU_GEMM=", gemm_backend_name(b), ", but ", unavailable_why(b));
  return b;
}

GemmBackend gemm_backend_named(const char* name) {
  const GemmBackend all[] = {GemmBackend::Eigen, GemmBackend::Avx2, GemmBackend::Avx512, GemmBackend::OneDnn};
  const auto* it = std::find_if(std::begin(all), std::end(all),
                                [&](GemmBackend b) { return std::strcmp(name, gemm_backend_name(b)) == 0; });
  ZDL_CHECK(it != std::end(all), "a CPU GEMM back end is eigen, avx2, avx512 or onednn, got '", name, "'");
  return *it;
}

bool gemm_backend_available(GemmBackend b) {
  switch (b) {
    case GemmBackend::Eigen: return true;
    case GemmBackend::Avx2: return gemm_blocked_supported(GemmIsa::Avx2);
    case GemmBackend::Avx512: return gemm_blocked_supported(GemmIsa::Avx512);
    case GemmBackend::OneDnn: return ZDL_WITH_ONEDNN;
  }
  return false;
}
GemmBackend gemm_backend() { return current_backend(); }
void set_gemm_backend(GemmBackend b) {
  ZDL_CHECK(gemm_backend_available(b), "set_gemm_backend: ", gemm_backend_name(b), " is not available here: ",
            unavailable_why(b));
  current_backend() = b;
}

const char* gemm_backend_name(GemmBackend b) {
  switch (b) {
    case GemmBackend::OneDnn: return "onednn";
    case GemmBackend::Avx2: return "avx2";
    case GemmBackend::Avx512: return "avx512";
    case GemmBackend::Eigen: break;
  }
  return "eigen";
}

template <class T>
void gemm(int64_t M, int64_t N, int64_t K, bool trans_a, const T* a, int64_t lda, bool trans_b, const T* b,
          int64_t ldb, T* c, int64_t ldc, bool accumulate) {
  check_dims(M, N, K, trans_a, lda, trans_b, ldb, ldc);
  gemm_unchecked(M, N, K, trans_a, a, lda, trans_b, b, ldb, c, ldc, accumulate);
}

template <class T>
void gemm_batched(int64_t batch, int64_t M, int64_t N, int64_t K, bool trans_a, const T* a, int64_t lda,
                  int64_t stride_a, bool trans_b, const T* b, int64_t ldb, int64_t stride_b, T* c, int64_t ldc,
                  int64_t stride_c, bool accumulate) {
  batched_products(batch, M, N, K, trans_a, a, lda, stride_a, trans_b, b, ldb, stride_b, c, ldc, stride_c, accumulate);
}

template <class T>
void gemm_on_this_thread(int64_t M, int64_t N, int64_t K, bool trans_a, const T* a, int64_t lda, bool trans_b,
                         const T* b, int64_t ldb, T* c, int64_t ldc, bool accumulate) {
  if constexpr (std::is_same_v<T, float>) {
    GemmIsa isa;
    if (own_kernel(isa)) {
      gemm_blocked(isa, M, N, K, trans_a, a, lda, trans_b, b, ldb, c, ldc, accumulate);
      return;
    }
  }
  OneThreadScope one;
  eigen_product(M, N, K, trans_a, a, lda, trans_b, b, ldb, c, ldc, accumulate);
}

bool gemm_bf16_available() {
  GemmIsa isa;
  return bf16_gemm(isa) != Bf16Gemm::None;
}

void gemm_bf16_batched(int64_t batch, int64_t M, int64_t N, int64_t K, bool trans_a, const BFloat16* a, int64_t lda,
                       int64_t stride_a, bool trans_b, const BFloat16* b, int64_t ldb, int64_t stride_b, BFloat16* c,
                       int64_t ldc, int64_t stride_c, bool accumulate) {
  ZDL_CHECK(gemm_bf16_available(), "gemm_bf16_batched: no native bf16 GEMM here (see gemm_bf16_available)");
  batched_products(batch, M, N, K, trans_a, a, lda, stride_a, trans_b, b, ldb, stride_b, c, ldc, stride_c, accumulate);
}

template <class T>
void fill_rows(int64_t rows, int64_t cols, const T* row, T* out) {
  parallel_for(rows, cols, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) std::copy(row, row + cols, out + r * cols);
  });
}

template <class T>
void gemm_reference(int64_t M, int64_t N, int64_t K, bool trans_a, const T* a, int64_t lda, bool trans_b,
                    const T* b, int64_t ldb, T* c, int64_t ldc, bool accumulate) {
  check_dims(M, N, K, trans_a, lda, trans_b, ldb, ldc);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double acc = accumulate ? static_cast<double>(c[m * ldc + n]) : 0.0;
      for (int64_t k = 0; k < K; ++k) {
        T av = trans_a ? a[k * lda + m] : a[m * lda + k];
        T bv = trans_b ? b[n * ldb + k] : b[k * ldb + n];
        acc += static_cast<double>(av) * static_cast<double>(bv);
      }
      c[m * ldc + n] = static_cast<T>(acc);
    }
  }
}

#define ZDL_INSTANTIATE(T)                                                                                        \
  template void gemm<T>(int64_t, int64_t, int64_t, bool, const T*, int64_t, bool, const T*, int64_t, T*, int64_t, \
                        bool);                                                                                    \
  template void gemm_batched<T>(int64_t, int64_t, int64_t, int64_t, bool, const T*, int64_t, int64_t, bool,        \
                                const T*, int64_t, int64_t, T*, int64_t, int64_t, bool);                          \
  template void fill_rows<T>(int64_t, int64_t, const T*, T*);                                                     \
  template void gemm_reference<T>(int64_t, int64_t, int64_t, bool, const T*, int64_t, bool, const T*, int64_t, T*, \
                                  int64_t, bool);                                                                 \
  template void gemm_on_this_thread<T>(int64_t, int64_t, int64_t, bool, const T*, int64_t, bool, const T*, int64_t, \
                                       T*, int64_t, bool);
ZDL_INSTANTIATE(float)
ZDL_INSTANTIATE(double)
#undef ZDL_INSTANTIATE
template void fill_rows<BFloat16>(int64_t, int64_t, const BFloat16*, BFloat16*);

}  // namespace zdl::kernels::cpu

// CPU throughput of zerodl's matmul and causal attention (forward, f32), in GFLOP/s.
// The PyTorch twin is bench/torch_cpu_ops.py (same sizes, same flop counts);
// bench/run_cpu_ops.sh runs both and prints the comparison table.
//
// Output, one machine-readable line per case:
//   RESULT zerodl <op> <size> <gflops> <median_ms>
// Flop counts: matmul [S,S] @ [S,S] = 2 S^3. Causal attention with B=2, NH=4, HS=64, T=S:
// q k^T and att v are 2 * B*NH*T*T*HS each, halved by the causal mask: 4 B NH T^2 HS / 2
// (softmax not counted, as usual).
//
//   ./cpu_ops_bench [threads=2] [sizes=256,512,1024,2048]
#include <omp.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "io/program_flags.h"
#include "kernels/cpu/matmul.h"

namespace {

using Clock = std::chrono::steady_clock;

// Median wall time of f in ms: warm-up runs first, then at least 5 timed runs and about
// 1.5 s in all (at most 50 runs).
double median_ms(const std::function<void()>& f) {
  for (int i = 0; i < 2; ++i) f();
  auto t0 = Clock::now();
  f();
  double first = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  int reps = std::clamp(static_cast<int>(1500.0 / std::max(first, 1e-3)), 5, 50);
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    auto s = Clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - s).count());
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
}

void report(const char* op, int64_t size, double flops, double ms) {
  std::printf("RESULT zerodl %s %lld %.2f %.3f\n", op, static_cast<long long>(size), flops / (ms * 1e6), ms);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  std::vector<int64_t> sizes = {256, 512, 1024, 2048};
  CLI::App app{"cpu_ops_bench: GFLOP/s of zerodl's CPU matmul and causal attention (bench/run_cpu_ops.sh)"};
  app.option_defaults()->always_capture_default();
  app.add_option("threads", threads, "OpenMP threads")->check(CLI::PositiveNumber);
  app.add_option("sizes", sizes, "matrix sizes S and sequence lengths T, comma-separated")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  if (std::optional<int> code = zdl::io::check_invocation("cpu_ops_bench", app, argc, argv)) return *code;
  omp_set_num_threads(threads);
  zdl::NoGradGuard no_grad;
  namespace kc = zdl::kernels::cpu;
  const kc::GemmBackend backend = kc::gemm_backend();
  std::printf("# zerodl cpu ops, %d threads (omp_get_max_threads=%d), f32 GEMM on %s\n", threads,
              omp_get_max_threads(), kc::gemm_backend_name(backend));

  // "matmul" is the back end zerodl uses; "matmul/eigen" is Eigen's, shown beside it when the
  // default is oneDNN (same tiles, same threads).
  for (int64_t S : sizes) {
    zdl::Tensor a = zdl::Tensor::randn({S, S}, 1), b = zdl::Tensor::randn({S, S}, 2);
    report("matmul", S, 2.0 * S * S * S, median_ms([&] { zdl::matmul(a, b); }));
    if (backend != kc::GemmBackend::Eigen) {
      kc::set_gemm_backend(kc::GemmBackend::Eigen);
      report("matmul/eigen", S, 2.0 * S * S * S, median_ms([&] { zdl::matmul(a, b); }));
      kc::set_gemm_backend(backend);
    }
  }

  const int64_t B = 2, NH = 4, HS = 64;
  for (int64_t T : sizes) {
    zdl::Tensor q = zdl::Tensor::randn({B, NH, T, HS}, 3), k = zdl::Tensor::randn({B, NH, T, HS}, 4),
                v = zdl::Tensor::randn({B, NH, T, HS}, 5);
    double ms = median_ms([&] { zdl::causal_attention(q, k, v); });
    report("causal_attention", T, 4.0 * B * NH * T * T * HS / 2.0, ms);
  }
  return 0;
}

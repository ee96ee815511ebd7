// Causal attention on one GPU, A/B: cuDNN's fused flash attention against zerodl's own CUDA
// kernels (the same op under ZDL_CUDNN_ATTENTION=0), bf16, q, k, v as views of a fused
// [B, T, 3C] projection (the GPT's layout). Per shape and path: the forward (as training runs
// it, statistics saved) and forward + backward, median ms and TFLOP/s, and how far the two
// paths' outputs and gradients are apart. bench/gpu/run_attention.sh runs it.
//
// Flops, as flash-attention papers count them: the forward's two products q k^T and P v are
// 2 B NH T^2 HS each, halved by the causal mask: 2 B NH T^2 HS; the backward's five products
// are 2.5 times that. The last line ("summary: ...") is what scripts/gpu_check.sh's table shows.
//
//   ./cuda_attention_bench [reps=20]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "kernels/cuda/cudnn_attention.h"

using namespace zdl;

namespace {

using Clock = std::chrono::steady_clock;

struct Shape4 {
  int64_t B, NH, T, HS;
  const char* name;
};

struct Run {
  double fwd_ms = 0, fwd_bwd_ms = 0;
  Tensor out, grad;  // on the CPU, for the comparison
};

Tensor attention_of_fused_qkv(const Tensor& qkv, const Shape4& s) {
  auto parts = split(qkv, s.NH * s.HS, 2);
  auto heads = [&](const Tensor& t) { return transpose(reshape(t, {s.B, s.T, s.NH, s.HS}), 1, 2); };
  return causal_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]));
}

// Median wall time of `reps` calls of f, each closed by a GPU synchronization.
template <class F>
double median_ms(int reps, const F& f) {
  const Device gpu = Device::cuda();
  std::vector<double> ms;
  for (int i = 0; i < reps + 2; ++i) {  // two warm-up calls (the first builds cuDNN's graphs)
    synchronize(gpu);
    const auto t0 = Clock::now();
    f();
    synchronize(gpu);
    if (i >= 2) ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
}

Run measure(const Shape4& s, const Tensor& qkv, const Tensor& dout, int reps) {
  Run r;
  auto leaf = [&] { return qkv.detach().set_requires_grad(true); };
  r.fwd_ms = median_ms(reps, [&] { attention_of_fused_qkv(leaf(), s); });
  r.fwd_bwd_ms = median_ms(reps, [&] { attention_of_fused_qkv(leaf(), s).backward(dout); });
  Tensor x = leaf();
  Tensor y = attention_of_fused_qkv(x, s);
  y.backward(dout);
  r.out = y.to(Device::cpu());
  r.grad = x.grad().to(Device::cpu());
  return r;
}

// max |a - b| / max |b|.
double rel_diff(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector(), y = b.to_vector();
  double diff = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    diff = std::max(diff, std::abs(x[i] - y[i]));
    scale = std::max(scale, std::abs(y[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 20;
  if (!cuda_available()) {
    std::printf("cuda_attention_bench: no CUDA device visible: nothing measured\n");
    return 0;
  }
  const std::vector<Shape4> shapes = {{16, 12, 1024, 64, "GPT-2 124M"}, {8, 16, 1024, 128, "HS=128"},
                                      {4, 12, 4096, 64, "T=4096"}};
  std::printf("causal attention, bf16, q k v from a fused [B, T, 3C] projection, median of %d on %s\n", reps,
              device_info(Device::cuda()).name.c_str());
  std::printf("%-11s %3s %3s %5s %4s  %-8s %8s %8s %13s  %s\n", "shape", "B", "NH", "T", "HS", "path", "fwd_ms",
              "fwd+bwd", "TFLOP/s f+b", "cuDNN vs kernels");
  namespace kcu = kernels::cuda;
  auto row = [&](const Shape4& s, const char* path, const Run& r, double fwd_flops) {
    std::printf("%-11s %3lld %3lld %5lld %4lld  %-8s %8.3f %8.3f %13.1f", s.name, static_cast<long long>(s.B),
                static_cast<long long>(s.NH), static_cast<long long>(s.T), static_cast<long long>(s.HS), path, r.fwd_ms,
                r.fwd_bwd_ms, 3.5 * fwd_flops / (r.fwd_bwd_ms * 1e9));
  };
  char summary[256] = "";
  for (const Shape4& s : shapes) {
    const int64_t C3 = 3 * s.NH * s.HS;
    Tensor qkv = Tensor::randn({s.B, s.T, C3}, 1, DType::BF16, Device::cuda());
    Tensor dout = Tensor::randn({s.B, s.NH, s.T, s.HS}, 2, DType::BF16, Device::cuda());
    const double fwd_flops = 2.0 * s.B * s.NH * s.T * s.T * s.HS;
    const int64_t runs_before = kcu::cudnn_attention_counters().backward_runs;
    const Run cudnn = measure(s, qkv, dout, reps);
    const bool ran_cudnn = kcu::cudnn_attention_counters().backward_runs > runs_before;
    setenv("ZDL_CUDNN_ATTENTION", "0", 1);
    const Run own = measure(s, qkv, dout, reps);
    unsetenv("ZDL_CUDNN_ATTENTION");
    row(s, ran_cudnn ? "cudnn" : "refused", cudnn, fwd_flops);
    std::printf("  out %.1e, dqkv %.1e (max diff / max)\n", rel_diff(cudnn.out, own.out),
                rel_diff(cudnn.grad, own.grad));
    row(s, "kernels", own, fwd_flops);
    std::printf("\n");
    if (!summary[0]) {
      if (ran_cudnn)
        std::snprintf(summary, sizeof summary, "attention at %s (B=%lld T=%lld): cuDNN %.1fx the kernels (fwd+bwd)",
                      s.name, static_cast<long long>(s.B), static_cast<long long>(s.T),
                      own.fwd_bwd_ms / cudnn.fwd_bwd_ms);
      else
        std::snprintf(summary, sizeof summary, "attention at %s: cuDNN refused the shape (see stderr)", s.name);
    }
    std::fflush(stdout);
  }
  std::printf("summary: %s\n", summary);
  return 0;
}

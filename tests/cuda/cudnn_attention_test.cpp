// cuDNN's fused attention (kernels/cuda/cudnn_attention.h, taken by causal_attention for bf16
// in builds with the cuDNN frontend) against zerodl's own CUDA kernels (the same op under
// ZDL_CUDNN_ATTENTION=0) and against the CPU in f32: outputs and dq, dk, dv, on contiguous
// q, k, v and on the strided views of a fused [B, T, 3C] projection (the GPT's layout, read
// without copies), the softmax statistics against the kernels' lse, determinism, one graph per
// shape and pass (reused by inference calls, which build a bounded number of their own), and
// shapes that fall back without an error. Every test skips where no GPU is visible or the
// build has no cuDNN path.
//
// Tolerances (max |difference| over max |reference|): cuDNN feeds the probabilities to the
// P v, dS k and dS^T q products in bf16, as flash attention does, where the kernels keep them
// f32; both compute scores and statistics in f32 and round every output once to bf16. One
// bf16 rounding is 2^-9 (2e-3) relative: outputs agree within 1e-2 and gradients, which sum
// T such rounded terms with varying signs, within 2e-2. The statistics are f32 on both sides
// from the same bf16 inputs: within 1e-3 absolute.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "cuda_compare.h"

#ifdef ZDL_WITH_CUDNN_FRONTEND
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cudnn_attention.h"

namespace zdl {

using cuda_test::expect_bit_equal;
using cuda_test::OpRun;
using cuda_test::rel_diff;
using cuda_test::run_op;
using cuda_test::ScopedEnv;
namespace kcu = kernels::cuda;

namespace {

constexpr double kForwardTol = 1e-2, kGradTol = 2e-2;

struct Dims {
  int64_t B, NH, T, HS;
};

std::string describe(const Dims& d, const char* what) {
  return std::string(what) + " B=" + std::to_string(d.B) + " NH=" + std::to_string(d.NH) +
         " T=" + std::to_string(d.T) + " HS=" + std::to_string(d.HS);
}

Tensor attention(const std::vector<Tensor>& in) { return causal_attention(in[0], in[1], in[2]); }

// The GPT's attention input: q, k, v as [B, NH, T, HS] views of qkv [B, T, 3C] (nn/transformer.cpp).
Tensor attention_of_fused_qkv(const std::vector<Tensor>& in, const Dims& d) {
  const int64_t C = d.NH * d.HS;
  auto parts = split(in[0], C, 2);
  auto heads = [&](const Tensor& t) { return transpose(reshape(t, {d.B, d.T, d.NH, d.HS}), 1, 2); };
  return causal_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]));
}

// q, k, v [B, NH, T, HS] bf16 on the CPU; unit normal, so scores q.k / sqrt(HS) ~ N(0, 1).
std::vector<Tensor> random_qkv(const Dims& d, uint64_t seed) {
  const Shape s = {d.B, d.NH, d.T, d.HS};
  const DType bf16 = DType::BF16;
  return {Tensor::randn(s, seed, bf16), Tensor::randn(s, seed + 1, bf16), Tensor::randn(s, seed + 2, bf16)};
}

// Output and gradients within the tolerances of the header comment.
void expect_near(const OpRun& got, const OpRun& want, const std::string& what) {
  ASSERT_EQ(got.out.shape(), want.out.shape()) << what;
  EXPECT_LT(rel_diff(got.out, want.out), kForwardTol) << what << ": forward";
  ASSERT_EQ(got.grads.size(), want.grads.size()) << what;
  for (size_t i = 0; i < want.grads.size(); ++i) {
    ASSERT_TRUE(got.grads[i].defined() && want.grads[i].defined()) << what << ": gradient of input " << i;
    EXPECT_LT(rel_diff(got.grads[i], want.grads[i]), kGradTol) << what << ": gradient of input " << i;
  }
}

kcu::CudnnAttentionCounters counters() { return kcu::cudnn_attention_counters(); }

// f forward and backward on the GPU through cuDNN, checking that cuDNN ran both passes.
OpRun run_cudnn(const cuda_test::OpFn& f, const std::vector<Tensor>& in, const std::string& what) {
  const kcu::CudnnAttentionCounters before = counters();
  OpRun r = run_op(f, in, Device::cuda());
  const kcu::CudnnAttentionCounters after = counters();
  EXPECT_EQ(after.forward_runs - before.forward_runs, 1) << what << ": cuDNN did not run the forward";
  EXPECT_EQ(after.backward_runs - before.backward_runs, 1) << what << ": cuDNN did not run the backward";
  EXPECT_EQ(after.graphs_refused, before.graphs_refused) << what << ": cuDNN refused the shape (see stderr)";
  return r;
}

// f on the GPU through zerodl's kernels.
OpRun run_kernels(const cuda_test::OpFn& f, const std::vector<Tensor>& in) {
  ScopedEnv kernels("ZDL_CUDNN_ATTENTION", "0");
  const kcu::CudnnAttentionCounters before = counters();
  OpRun r = run_op(f, in, Device::cuda());
  EXPECT_EQ(counters().forward_runs, before.forward_runs) << "ZDL_CUDNN_ATTENTION=0 still ran cuDNN";
  return r;
}

}  // namespace

TEST(CudnnAttention, MatchesTheKernels) {
  ZDL_REQUIRE_GPU();
  // Sequence lengths off and on cuDNN's 64/128 tiles, head sizes 32, 64 and 128.
  for (Dims d : {Dims{2, 2, 64, 64}, Dims{3, 5, 200, 64}, Dims{4, 12, 256, 64}, Dims{2, 4, 1024, 64},
                 Dims{2, 3, 130, 32}, Dims{2, 6, 320, 128}}) {
    const std::string what = describe(d, "contiguous q, k, v");
    const std::vector<Tensor> in = random_qkv(d, 10);
    expect_near(run_cudnn(attention, in, what), run_kernels(attention, in), what);
  }
}

TEST(CudnnAttention, ReadsTheFusedQkvViews) {
  ZDL_REQUIRE_GPU();
  // GPT-2 124M's attention (NH=12, HS=64, T=1024), and HS=128; the gradient is qkv's, [B, T, 3C].
  for (Dims d : {Dims{4, 12, 1024, 64}, Dims{2, 4, 256, 128}, Dims{3, 2, 100, 64}}) {
    const std::string what = describe(d, "fused qkv views");
    auto f = [d](const std::vector<Tensor>& in) { return attention_of_fused_qkv(in, d); };
    const std::vector<Tensor> in = {Tensor::randn({d.B, d.T, 3 * d.NH * d.HS}, 20, DType::BF16)};
    // The views are what cuDNN reads: strides {T*3C, HS, 3C, 1}, not contiguous.
    Tensor q = transpose(reshape(split(in[0], d.NH * d.HS, 2)[0], {d.B, d.T, d.NH, d.HS}), 1, 2);
    const int64_t C3 = 3 * d.NH * d.HS;
    ASSERT_EQ(q.strides(), (Shape{d.T * C3, d.HS, C3, 1})) << what;
    expect_near(run_cudnn(f, in, what), run_kernels(f, in), what);
  }
}

TEST(CudnnAttention, MatchesTheCpuInF32) {
  ZDL_REQUIRE_GPU();
  // The CPU computes in f32 on the same bf16 values (cast exactly to f32), unrounded.
  for (Dims d : {Dims{1, 2, 64, 64}, Dims{2, 3, 130, 32}}) {
    const std::string what = describe(d, "vs CPU f32");
    const std::vector<Tensor> in = random_qkv(d, 30);
    std::vector<Tensor> in_f32;
    for (const Tensor& t : in) in_f32.push_back(cast(t, DType::F32));
    OpRun gpu = run_cudnn(attention, in, what);
    OpRun cpu = run_op(attention, in_f32, Device::cpu());
    ASSERT_EQ(cpu.out.dtype(), DType::F32);
    expect_near(gpu, cpu, what);
  }
}

TEST(CudnnAttention, StatisticsAreTheKernelsLse) {
  ZDL_REQUIRE_GPU();
  const Dims d{2, 3, 200, 64};
  const int64_t BNH = d.B * d.NH;
  std::vector<Tensor> in;
  for (const Tensor& t : random_qkv(d, 40)) in.push_back(t.to(Device::cuda()));
  const kcu::SdpaProblem p{.dtype = DType::BF16, .b = d.B, .nh = d.NH, .t = d.T, .hs = d.HS,
                           .q_stride = {d.NH * d.T * d.HS, d.T * d.HS, d.HS, 1},
                           .k_stride = {d.NH * d.T * d.HS, d.T * d.HS, d.HS, 1},
                           .v_stride = {d.NH * d.T * d.HS, d.T * d.HS, d.HS, 1}};
  const std::optional<size_t> bytes =
      kcu::cudnn_attention_plan(p, kcu::SdpaPass::Forward, kcu::SdpaCaller::Training);
  ASSERT_TRUE(bytes.has_value()) << "cuDNN refused " << describe(d, "the forward") << " (see stderr)";
  Tensor work = Tensor::empty({static_cast<int64_t>(*bytes / 4) + 4}, DType::F32, Device::cuda());
  Tensor out = Tensor::empty({d.B, d.NH, d.T, d.HS}, DType::BF16, Device::cuda());
  Tensor stats = Tensor::empty({d.B, d.NH, d.T}, DType::F32, Device::cuda());
  kcu::cudnn_attention_forward(p, in[0].raw_data(), in[1].raw_data(), in[2].raw_data(), out.raw_data(),
                               stats.data<float>(), work.raw_data());
  Tensor ref_out = Tensor::empty({d.B, d.NH, d.T, d.HS}, DType::BF16, Device::cuda());
  Tensor lse = Tensor::empty({d.B, d.NH, d.T}, DType::F32, Device::cuda());
  kcu::causal_attention_forward(DType::BF16, BNH, d.T, d.HS, in[0].raw_data(), in[1].raw_data(), in[2].raw_data(),
                                ref_out.raw_data(), lse.data<float>());
  std::vector<double> got = stats.to_vector(), want = lse.to_vector();
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
  EXPECT_LT(worst, 1e-3) << "cuDNN's statistics are not the log-sum-exp of the scaled, masked scores";
  EXPECT_LT(rel_diff(out, ref_out), kForwardTol);
}

TEST(CudnnAttention, IsDeterministic) {
  ZDL_REQUIRE_GPU();
  const Dims d{2, 3, 130, 64};
  const std::vector<Tensor> in = random_qkv(d, 50);
  const std::string what = describe(d, "twice");
  expect_bit_equal(run_cudnn(attention, in, what), run_cudnn(attention, in, what), what);
}

TEST(CudnnAttention, BuildsOneGraphPerShapeAndPass) {
  ZDL_REQUIRE_GPU();
  const Dims d{1, 2, 96, 64};
  const std::vector<Tensor> in = random_qkv(d, 60);
  kcu::CudnnAttentionCounters c0 = counters();
  run_cudnn(attention, in, "first training call");
  kcu::CudnnAttentionCounters c1 = counters();
  EXPECT_EQ(c1.graphs_built - c0.graphs_built, 2) << "a training call builds the forward and backward graphs";
  run_cudnn(attention, in, "second training call");
  run_cudnn(attention, in, "third training call");
  kcu::CudnnAttentionCounters c2 = counters();
  EXPECT_EQ(c2.graphs_built, c1.graphs_built) << "the same shape built again";

  std::vector<Tensor> on_gpu;
  for (const Tensor& t : in) on_gpu.push_back(t.to(Device::cuda()));
  NoGradGuard no_grad;
  // Inference reuses the training graph of its shape...
  Tensor y = causal_attention(on_gpu[0], on_gpu[1], on_gpu[2]);
  kcu::CudnnAttentionCounters c3 = counters();
  EXPECT_EQ(c3.forward_runs - c2.forward_runs, 1) << "inference at a trained shape did not run cuDNN";
  EXPECT_EQ(c3.graphs_built, c2.graphs_built);
  // ...builds forward graphs (only) for at most kCudnnInferenceShapes new shapes, then runs new
  // shapes on the kernels, as a sampler growing T by one per call would.
  int built = 0;
  bool kernels_ran = false;
  for (int64_t t = 97; t <= 97 + kcu::kCudnnInferenceShapes; ++t) {
    std::vector<Tensor> x;
    for (const Tensor& v : random_qkv(Dims{1, 2, t, 64}, 70)) x.push_back(v.to(Device::cuda()));
    const kcu::CudnnAttentionCounters before = counters();
    Tensor z = causal_attention(x[0], x[1], x[2]);
    const kcu::CudnnAttentionCounters after = counters();
    EXPECT_EQ(z.shape(), (Shape{1, 2, t, 64}));
    const int64_t graphs = after.graphs_built - before.graphs_built, runs = after.forward_runs - before.forward_runs;
    if (runs == 1) {
      EXPECT_FALSE(kernels_ran) << "T=" << t << ": cuDNN again after the kernels took a new shape";
      EXPECT_EQ(graphs, 1) << "T=" << t << ": an inference call builds the forward graph only";
      ++built;
    } else {
      EXPECT_EQ(graphs, 0) << "T=" << t;
      kernels_ran = true;
    }
  }
  EXPECT_LE(built, kcu::kCudnnInferenceShapes);
  EXPECT_TRUE(kernels_ran) << "inference built a graph for every new shape";
  // ZDL_CUDNN_ATTENTION=0 turns even a built shape over to the kernels.
  {
    ScopedEnv kernels("ZDL_CUDNN_ATTENTION", "0");
    const int64_t runs = counters().forward_runs;
    Tensor w = causal_attention(on_gpu[0], on_gpu[1], on_gpu[2]);
    EXPECT_EQ(counters().forward_runs, runs);
    EXPECT_LT(rel_diff(w, y), kForwardTol);
  }
}

TEST(CudnnAttention, UnsupportedShapesFallBackWithoutError) {
  ZDL_REQUIRE_GPU();
  struct Case {
    Dims d;
    const char* why;
  };
  // HS = 12: not a multiple of 8 (never offered to cuDNN); HS = 8 with T = 1: cuDNN's backward
  // refuses s_q = s_kv = 1 when it builds, so the shape runs on the kernels in both passes.
  for (const Case& c : {Case{{2, 3, 50, 12}, "HS not a multiple of 8"}, Case{{2, 3, 1, 8}, "T = 1"}}) {
    const std::string what = describe(c.d, c.why);
    const std::vector<Tensor> in = random_qkv(c.d, 80);
    const kcu::CudnnAttentionCounters before = counters();
    OpRun gpu;
    ASSERT_NO_THROW(gpu = run_op(attention, in, Device::cuda())) << what;
    EXPECT_EQ(counters().forward_runs, before.forward_runs) << what << ": ran on cuDNN";
    expect_near(gpu, run_op(attention, in, Device::cpu()), what);
  }
  // A fused projection whose rows are not a multiple of 16 bytes (3C + 4 elements): the views'
  // strides would misalign cuDNN's vector loads, so the kernels (on copies) run it.
  const Dims d{2, 2, 64, 64};
  const int64_t C = d.NH * d.HS;
  auto f = [d, C](const std::vector<Tensor>& in) {
    return attention_of_fused_qkv({slice(in[0], 2, 0, 3 * C)}, d);
  };
  const std::vector<Tensor> in = {Tensor::randn({d.B, d.T, 3 * C + 4}, 90, DType::BF16)};
  const kcu::CudnnAttentionCounters before = counters();
  OpRun gpu;
  ASSERT_NO_THROW(gpu = run_op(f, in, Device::cuda()));
  EXPECT_EQ(counters().forward_runs, before.forward_runs) << "misaligned strides ran on cuDNN";
  expect_near(gpu, run_kernels(f, in), "misaligned fused qkv");
}

}  // namespace zdl

#else

TEST(CudnnAttention, NotBuilt) {
  GTEST_SKIP() << "built without cuDNN attention (cmake/ZdlCudnn.cmake: cuDNN 9 and the cuDNN frontend)";
}

#endif

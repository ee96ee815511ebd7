// Training on the GPU: the optimizer kernels against their CPU twins, a whole GPT training step
// on the GPU against the same step on the CPU, ZeRO stages 0-3 on the GPU (local and one-rank
// NCCL communicators) against stage 0, a step's one host wait and its memory taken from the
// driver, device memory by category, non-finite gradients, the
// sharded checkpoint round trip through the host, and the errors for misplaced runs. Every test
// skips where no GPU is visible (the CUDA kernels are not even compiled in a CPU-only build), the
// NCCL one also in a build without NCCL.
//
// Tolerances: the optimizer kernel does the CPU twin's f32 arithmetic in the same order, each
// operation rounded on its own on both sides: the same bits (optimizer offload to cpu depends on
// it); sums of squares accumulate in double (1e-12). A GPT step on the GPU differs from the CPU's by the summation orders of
// GEMMs and reductions, which Adam amplifies a little for tiny gradients: losses and parameters
// within 1e-4 (f32); bf16 runs on either device within what bf16 rounding predicts of their
// drift from the f32 run (tests/dist/zero_harness.h, [Note: bf16 against rounding's prediction]).
// ZeRO stages at N = 1 run the same kernels in the same order on the same buffers, so they agree
// with stage 0 to 1e-6 (bit-exact in practice; the bound leaves room for a GEMM algorithm chosen
// per pointer alignment).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/deferred_read.h"
#include "core/device_copy.h"
#include "core/rng.h"
#include "dist/zero/trainer.h"
#include "cuda_compare.h"
#include "dist/comm/local_communicator.h"
#include "dist/checkpoint/sharded_checkpoint.h"
#include "dist/offload_cases.h"
#include "dist/zero_harness.h"
#include "kernels/cpu/optim.h"
#include "temp_dir.h"
#ifdef ZDL_WITH_CUDA
#include "kernels/cuda/optim.h"
#endif

namespace zdl {

using cuda_test::rel_diff;
using dist::ZeroStage;
using dist::testing::Bf16Prediction;
using dist::testing::bf16_prediction;
using dist::testing::expect_within_bf16_prediction;
using dist::testing::rel_l2;
using dist::testing::RunConfig;
using dist::testing::RunResult;
using dist::testing::run_zero;

namespace {

const ZeroStage kStages[] = {ZeroStage::DDP, ZeroStage::One, ZeroStage::Two, ZeroStage::Three};

std::shared_ptr<dist::Communicator> local_comm(Device d) { return std::make_shared<dist::LocalCommunicator>(d); }

// Losses step by step and every parameter (relative L2) within tol of the reference.
void expect_same_run(const RunResult& got, const RunResult& want, double tol, const std::string& what) {
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (size_t s = 0; s < want.losses.size(); ++s)
    EXPECT_LE(std::abs(got.losses[s] - want.losses[s]), tol * std::abs(want.losses[s]))
        << what << " step " << s + 1 << ": loss " << got.losses[s] << " vs " << want.losses[s];
  EXPECT_EQ(got.params.size(), want.params.size()) << what;
  for (auto& [name, v] : want.params) {
    auto it = got.params.find(name);
    ASSERT_NE(it, got.params.end()) << what << ": no parameter " << name;
    EXPECT_LE(rel_l2(it->second, v), tol) << what << ": parameter " << name;
  }
}

std::vector<float> random_floats(int64_t n, uint64_t seed, double stddev = 1.0) {
  Tensor t = Tensor::randn({n}, seed, DType::F32, Device::cpu(), 0, 0.0, stddev);
  return std::vector<float>(t.data<float>(), t.data<float>() + n);
}

}  // namespace

// ---------------- optimizer kernels vs the CPU twins ----------------

#ifdef ZDL_WITH_CUDA
namespace {

// The chunk table of `segments` on the GPU (I64 words, 3 per chunk).
Tensor device_table(const std::vector<kernels::cuda::AdamWSegment>& segments, int64_t* count) {
  auto chunks = kernels::cuda::adamw_chunks(segments);
  *count = static_cast<int64_t>(chunks.size());
  Tensor host = Tensor::empty({3 * *count}, DType::I64);
  if (*count) std::memcpy(host.raw_data(), chunks.data(), chunks.size() * sizeof(chunks[0]));
  return host.to(Device::cuda());
}

}  // namespace
#endif

TEST(CudaOptim, AdamWMatchesCpuTwinOnOddSegments) {
  ZDL_REQUIRE_GPU();
#ifdef ZDL_WITH_CUDA
  const int64_t n = 10007;
  // Segments with different decays, one longer than a chunk and crossing chunk boundaries, a
  // three-element one, and element 9000 in no segment (must stay untouched).
  const std::vector<kernels::cuda::AdamWSegment> segments = {
      {0, 3, 0.1}, {3, 4097, 0.0}, {4100, 4900, 0.1}, {9001, 1006, 0.05}};
  int64_t nchunks = 0;
  Tensor table = device_table(segments, &nchunks);
  EXPECT_EQ(nchunks, 1 + 2 + 2 + 1);
  for (DType gdt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(gdt));
    std::vector<float> p = random_floats(n, 1, 0.5), m(n, 0.0f), v(n, 0.0f);
    Tensor dp = Tensor::from_vector(p, {n}).to(Device::cuda());
    Tensor dm = Tensor::zeros({n}, DType::F32, Device::cuda());
    Tensor dv = Tensor::zeros({n}, DType::F32, Device::cuda());
    for (int64_t step = 1; step <= 5; ++step) {
      // Gradients of mixed magnitudes, rounded to the gradient dtype on both sides alike.
      Tensor g = Tensor::from_vector(random_floats(n, 100 + step, step == 3 ? 1e-4 : 2.0), {n}, gdt);
      Tensor dg = g.to(Device::cuda());
      const double gs = step == 2 ? 1.0 : 0.7;
      kernels::cpu::AdamWParams h{1e-2, 0.9, 0.95, 1e-8, 0.0, step};
      for (const auto& s : segments) {
        kernels::cpu::AdamWParams hs = h;
        hs.weight_decay = s.weight_decay;
        if (gdt == DType::BF16)
          kernels::cpu::adamw_update<float, BFloat16>(s.n, p.data() + s.offset, g.data<BFloat16>() + s.offset,
                                                      m.data() + s.offset, v.data() + s.offset, hs, gs);
        else
          kernels::cpu::adamw_update<float, float>(s.n, p.data() + s.offset, g.data<float>() + s.offset,
                                                   m.data() + s.offset, v.data() + s.offset, hs, gs);
      }
      kernels::cuda::adamw_update(gdt, static_cast<const kernels::cuda::AdamWChunk*>(table.raw_data()), nchunks,
                                  dp.data<float>(), dg.raw_data(), dm.data<float>(), dv.data<float>(), h, gs);
    }
    // Bit for bit: optimizer offload to cpu runs the twin in place of this kernel.
    EXPECT_EQ(dp.to_vector(), Tensor::from_vector(p, {n}).to_vector()) << "parameters";
    EXPECT_EQ(dm.to_vector(), Tensor::from_vector(m, {n}).to_vector()) << "first moments";
    EXPECT_EQ(dv.to_vector(), Tensor::from_vector(v, {n}).to_vector()) << "second moments";
    auto got = dp.to_vector();
    EXPECT_EQ(static_cast<float>(got[9000]), p[9000]) << "an element outside every segment was written";
    EXPECT_EQ(dm.to_vector()[9000], 0.0);
  }
#endif
}

TEST(CudaOptim, AdamWRejectsUnsupportedGradients) {
  ZDL_REQUIRE_GPU();
#ifdef ZDL_WITH_CUDA
  int64_t nchunks = 0;
  Tensor table = device_table({{0, 4, 0.0}}, &nchunks);
  Tensor f = Tensor::zeros({4}, DType::F32, Device::cuda());
  Tensor g64 = Tensor::zeros({4}, DType::F64, Device::cuda());
  std::string m = cuda_test::error_text([&] {
    kernels::cuda::adamw_update(DType::F64, static_cast<const kernels::cuda::AdamWChunk*>(table.raw_data()), nchunks,
                                f.data<float>(), g64.raw_data(), f.data<float>(), f.data<float>(), {}, 1.0);
  });
  EXPECT_NE(m.find("f64"), std::string::npos) << m;
  EXPECT_THROW(kernels::cuda::adamw_chunks({{0, -1, 0.0}}), Error);
#endif
}

TEST(CudaOptim, SumSquaresMatchesCpuAndIsBitStable) {
  ZDL_REQUIRE_GPU();
#ifdef ZDL_WITH_CUDA
  for (DType dt : {DType::F32, DType::BF16})
    for (int64_t n : {0, 1, 31, 4097, 1000003}) {
      const std::string what = std::string(dtype_name(dt)) + " n=" + std::to_string(n);
      Tensor x = Tensor::from_vector(random_floats(std::max<int64_t>(n, 1), 7 + n, 3.0), {std::max<int64_t>(n, 1)}, dt);
      x = Tensor::from_storage(x.storage(), {n}, {1}, 0, dt);
      const double want = dt == DType::BF16 ? kernels::cpu::sum_squares<BFloat16>(n, x.data<BFloat16>())
                                            : kernels::cpu::sum_squares<float>(n, x.data<float>());
      Tensor dx = x.contiguous_copy().to(Device::cuda());
      Tensor ws = Tensor::empty({kernels::cuda::sum_squares_partials(n) + 2}, DType::F64, Device::cuda());
      double* w = static_cast<double*>(ws.raw_data());
      const int64_t parts = kernels::cuda::sum_squares_partials(n);
      kernels::cuda::sum_squares(dt, n, n ? dx.raw_data() : nullptr, w, w + parts);
      kernels::cuda::sum_squares(dt, n, n ? dx.raw_data() : nullptr, w, w + parts + 1);  // reusing the partials
      auto got = Tensor::from_storage(ws.storage(), {2}, {1}, parts, DType::F64).to_vector();
      EXPECT_LE(std::abs(got[0] - want), 1e-12 * std::max(1.0, want)) << what << ": " << got[0] << " vs " << want;
      uint64_t a, b;
      std::memcpy(&a, &got[0], 8);
      std::memcpy(&b, &got[1], 8);
      EXPECT_EQ(a, b) << what << ": two runs differ in their bits";
    }
  // A NaN or an Inf anywhere makes the sum non-finite (the non-finite-gradient detection relies on it).
  for (double bad : {std::nan(""), static_cast<double>(INFINITY)}) {
    std::vector<float> v = random_floats(70001, 3);
    v[54321] = static_cast<float>(bad);
    Tensor dx = Tensor::from_vector(v, {70001}).to(Device::cuda());
    Tensor ws = Tensor::empty({kernels::cuda::sum_squares_partials(70001) + 1}, DType::F64, Device::cuda());
    double* w = static_cast<double*>(ws.raw_data());
    kernels::cuda::sum_squares(DType::F32, 70001, dx.raw_data(), w, w + kernels::cuda::sum_squares_partials(70001));
    EXPECT_FALSE(std::isfinite(ws.to_vector().back())) << bad;
  }
#endif
}

// ---------------- a GPT training step: GPU vs CPU ----------------

TEST(CudaTrain, GptStepsMatchCpuInF32) {
  ZDL_REQUIRE_GPU();
  for (ZeroStage s : {ZeroStage::DDP, ZeroStage::Three}) {
    RunConfig c{.stage = s, .steps = 3, .grad_accum = 2};
    RunResult cpu = run_zero(*local_comm(Device::cpu()), c);
    c.device = Device::cuda();
    RunResult gpu = run_zero(*local_comm(Device::cuda()), c);
    expect_same_run(gpu, cpu, 1e-4, std::string("f32 ") + dist::stage_name(s) + " GPU vs CPU");
  }
}

TEST(CudaTrain, GptStepsMatchCpuInBf16) {
  ZDL_REQUIRE_GPU();
  RunConfig c{.stage = ZeroStage::DDP, .dtype = DType::BF16, .steps = 3};
  const Bf16Prediction p = bf16_prediction(c, 1);
  expect_within_bf16_prediction(run_zero(*local_comm(Device::cpu()), c), p, "CPU bf16");
  c.device = Device::cuda();
  expect_within_bf16_prediction(run_zero(*local_comm(Device::cuda()), c), p, "GPU bf16");
}

// ---------------- ZeRO stages on the GPU ----------------

TEST(CudaZero, EveryStageMatchesStage0OnTheGpu) {
  ZDL_REQUIRE_GPU();
  auto comm = local_comm(Device::cuda());
  for (DType dt : {DType::F32, DType::BF16}) {
    RunConfig c{.stage = ZeroStage::DDP, .dtype = dt, .steps = 3, .grad_accum = 2, .device = Device::cuda()};
    RunResult ref = run_zero(*comm, c);
    for (ZeroStage s : kStages) {
      c.stage = s;
      expect_same_run(run_zero(*comm, c), ref, 1e-6, std::string(dtype_name(dt)) + " " + dist::stage_name(s));
    }
    c.stage = ZeroStage::Three;
    c.prefetch = 0;
    expect_same_run(run_zero(*comm, c), ref, 1e-6, std::string(dtype_name(dt)) + " zero3 without prefetch");
  }
}

TEST(CudaZero, OneRankNcclMatchesStage0) {
  ZDL_REQUIRE_GPU();
#ifndef ZDL_WITH_NCCL
  // dist::init would throw "this zerodl build has no NCCL": a build choice, not a failure.
  GTEST_SKIP() << "this build has no NCCL (ZDL_NCCL=OFF, or nccl.h / libnccl not found)";
#endif
  if (dist::launched_by_mpi()) GTEST_SKIP() << "one-rank test; run without mpirun";
  auto nccl = dist::init({.device = Device::cuda(), .backend = "nccl"});
  ASSERT_EQ(nccl->backend(), "nccl");
  RunConfig c{.stage = ZeroStage::DDP, .steps = 3, .device = nccl->device()};
  RunResult ref = run_zero(*local_comm(nccl->device()), c);
  for (ZeroStage s : kStages) {
    c.stage = s;
    expect_same_run(run_zero(*nccl, c), ref, 1e-6, std::string("nccl ") + dist::stage_name(s));
  }
}

// The model states are on the device, by category as the ZeRO paper counts them (N = 1, f32,
// padded size P): params 4P, grads 4P, Adam 8P; nothing of them on the host.
TEST(CudaZero, ModelStatesLiveOnTheDevice) {
  ZDL_REQUIRE_GPU();
  using MC = MemoryCategory;
  const MC cats[] = {MC::Parameter, MC::ParameterShard, MC::Gradient, MC::GradientShard, MC::OptimizerState};
  auto comm = local_comm(Device::cuda());
  for (ZeroStage s : kStages) {
    std::map<MC, int64_t> dev0, host0;
    for (MC k : cats) {
      dev0[k] = memory_ledger().stats(Device::cuda()).current_of(k);
      host0[k] = memory_ledger().stats(Device::cpu()).current_of(k);
    }
    dist::testing::Probe probe;
    probe.after_step = [&](dist::ZeroPartitioner& z, int) {
      const int64_t P = z.num_padded();
      std::map<MC, int64_t> want;
      switch (s) {
        case ZeroStage::DDP:
        case ZeroStage::One: want = {{MC::Parameter, 4 * P}, {MC::Gradient, 4 * P}, {MC::OptimizerState, 8 * P}}; break;
        case ZeroStage::Two: want = {{MC::Parameter, 4 * P}, {MC::GradientShard, 4 * P}, {MC::OptimizerState, 8 * P}}; break;
        case ZeroStage::Three:
          want = {{MC::ParameterShard, 4 * P}, {MC::GradientShard, 4 * P}, {MC::OptimizerState, 8 * P}};
          break;
      }
      for (MC k : cats) {
        EXPECT_EQ(memory_ledger().stats(Device::cuda()).current_of(k) - dev0[k], want[k])
            << dist::stage_name(s) << " device " << category_name(k);
        EXPECT_EQ(memory_ledger().stats(Device::cpu()).current_of(k) - host0[k], 0)
            << dist::stage_name(s) << " host " << category_name(k);
      }
    };
    run_zero(*comm, RunConfig{.stage = s, .steps = 1, .device = Device::cuda()}, probe);
  }
}

// ---------------- optimizer offload to cpu: the host tier ----------------

// Masters and moments on the host, the CPU's update in place of the GPU's kernel: the bits of the
// run without offload at every stage, f32 and bf16 (with accumulation), a skipped step, native reduction.
TEST(CudaZero, HostTierGivesTheBitsOfTheRunWithout) {
  ZDL_REQUIRE_GPU();
  dist::testing::expect_host_tier_bit_identical(*local_comm(Device::cuda()), Device::cuda());
}

// The device keeps parameters and gradients only; the host the closed form's masters, moments and
// exchange buffers.
TEST(CudaZero, HostTierLeavesTheOptimizerStatesOnTheHost) {
  ZDL_REQUIRE_GPU();
  dist::testing::expect_host_tier_memory_closed_form(*local_comm(Device::cuda()), Device::cuda());
}

TEST(CudaZero, HostTierCheckpointsResumeExactly) {
  ZDL_REQUIRE_GPU();
  dist::testing::expect_host_tier_checkpoints_resume_exactly(*local_comm(Device::cuda()), Device::cuda());
}

// Every copy between host and GPU held back 3 ms on its stream: a missing wait would read stale
// gradients or let the next forward read stale parameters; the bits must not change.
TEST(CudaZero, HostTierWaitsForItsCopies) {
  ZDL_REQUIRE_GPU();
  struct Delay {
    Delay() { ::setenv("ZDL_CUDA_COPY_DELAY_US", "3000", 1); }
    ~Delay() { ::unsetenv("ZDL_CUDA_COPY_DELAY_US"); }
  } delay;
  auto comm = local_comm(Device::cuda());
  for (ZeroStage s : {ZeroStage::DDP, ZeroStage::One, ZeroStage::Three}) {
    RunConfig c{.stage = s, .dtype = DType::BF16, .grad_accum = 2, .batch = 8, .device = Device::cuda()};
    const RunResult ref = run_zero(*comm, c);
    c.offload = dist::testing::host_tier();
    dist::testing::expect_same_bits(*comm, run_zero(*comm, c), ref, std::string("slow copies ") + dist::stage_name(s));
  }
}

TEST(CudaZero, HostTierRereadsGradientsAfterAnUpload) {
  ZDL_REQUIRE_GPU();
  dist::testing::expect_host_tier_rereads_gradients(*local_comm(Device::cuda()), Device::cuda());
}

// A NaN in one gradient on the GPU is found by the device sum of squares and named by unit, as
// on the CPU; the skipped step leaves the run where the CPU's skipped run ends.
TEST(CudaZero, NonFiniteGradientsAreNamedOnTheGpu) {
  ZDL_REQUIRE_GPU();
  for (ZeroStage s : {ZeroStage::DDP, ZeroStage::Three}) {
    RunConfig c{.stage = s, .poison_step = 1};
    RunResult cpu = run_zero(*local_comm(Device::cpu()), c);
    c.device = Device::cuda();
    RunResult gpu = run_zero(*local_comm(Device::cuda()), c);
    ASSERT_EQ(gpu.nonfinite.size(), static_cast<size_t>(c.steps));
    for (int step = 0; step < c.steps; ++step) {
      ASSERT_EQ(gpu.nonfinite[step].size(), step == c.poison_step ? 1u : 0u) << dist::stage_name(s) << " step " << step;
      if (step == c.poison_step) EXPECT_EQ(gpu.nonfinite[step][0].name, "h.1");
    }
    for (size_t i = 0; i < cpu.losses.size(); ++i)
      if (i != static_cast<size_t>(c.poison_step))
        EXPECT_NEAR(gpu.losses[i], cpu.losses[i], 1e-4 * std::abs(cpu.losses[i])) << dist::stage_name(s);
    for (auto& [name, v] : cpu.params) EXPECT_LE(rel_l2(gpu.params[name], v), 1e-4) << dist::stage_name(s) << " " << name;
  }
}

// ---------------- checkpoints and gathered parameters through the host ----------------

namespace {

struct Trainer {
  std::unique_ptr<dist::ZeroPartitioner> zero;
  std::shared_ptr<nn::GPT> model;
  std::unique_ptr<dist::ZeroAdamW> opt;
};

Trainer make_trainer(const std::shared_ptr<dist::Communicator>& comm, ZeroStage stage, Device dev, uint64_t seed = 7) {
  Trainer t;
  t.zero = std::make_unique<dist::ZeroPartitioner>(comm, dist::ZeroOptions{.stage = stage, .device = dev});
  {
    auto scope = t.zero->placement_scope(seed);
    t.model = std::make_shared<nn::GPT>(dist::testing::tiny_gpt());
  }
  t.zero->wrap(*t.model);
  t.opt = std::make_unique<dist::ZeroAdamW>(*t.zero, dist::testing::adam_opts(), 0.1);
  return t;
}

void train_steps(Trainer& t, int steps, Device dev) {
  RunConfig c;
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = dist::testing::global_batch(c, t.model->config.vocab_size, s, 0);
    t.model->loss(x.to(dev), y.to(dev)).backward();
    t.opt->step(t.zero->clip_grad_norm(1.0));
    t.zero->zero_grad();
  }
}

// Every unit's master and moments, on the host (N = 1: the whole unit).
std::vector<std::vector<double>> states_of(dist::ZeroPartitioner& z, const dist::ZeroAdamW& opt) {
  std::vector<std::vector<double>> out;
  const std::vector<dist::OptimizerShard> shards = z.optimizer_shards();
  for (size_t i = 0; i < shards.size(); ++i)
    for (const Tensor* t : std::initializer_list<const Tensor*>{&shards[i].master, &opt.exp_avg(i), &opt.exp_avg_sq(i)})
      out.push_back(t->to_vector());
  return out;
}

}  // namespace

// [Note: reads the host takes later] (core/deferred_read.h): a training step on the GPU waits for
// it once, for the gradient norm, which brings the micro-batches' losses with it (the token ids'
// range checks and uploads wait for nothing); from the third step on it takes no new memory from
// the driver (the stream-ordered pool hands out what the last step freed). DDP and ZeRO-3 (its
// gathers and frees), four micro-batches a step; the losses are the ones item() reads.
TEST(CudaTrain, AStepWaitsForTheGpuOnceAndTakesNoNewMemory) {
  ZDL_REQUIRE_GPU();
  for (ZeroStage stage : {ZeroStage::DDP, ZeroStage::Three}) {
    SCOPED_TRACE(dist::stage_name(stage));
    Trainer t = make_trainer(local_comm(Device::cuda()), stage, Device::cuda());
    RunConfig c;
    const int64_t V = t.model->config.vocab_size;
    // Four micro-batches: eight uploads a step, more than a few staging buffers.
    dist::Trainer trainer(*t.zero, *t.opt, dist::TrainerOptions{.grad_accum = 4, .micro_batch = 1, .grad_clip = 1.0});
    auto rows = [&](int64_t step, int64_t first, int64_t count) {
      auto [x, y] = dist::testing::step_rows(c, V, static_cast<int>(step), first, count);
      return dist::Trainer::Batch{x.to(Device::cuda()), y.to(Device::cuda())};
    };
    auto loss = [&](const Tensor& x, const Tensor& y) { return t.model->loss(x, y); };
    for (int64_t step = 0; step < 2; ++step) trainer.step(step, rows, loss);
    cuda_synchronize();
    const int64_t waits = cuda_host_waits();
    const int64_t reserved = cuda_pool_reserved_bytes();
    const dist::StepResult r = trainer.step(2, rows, loss);
    EXPECT_EQ(cuda_host_waits() - waits, 1);
    cuda_synchronize();
    EXPECT_EQ(cuda_pool_reserved_bytes(), reserved);
    EXPECT_TRUE(r.applied);
    // The losses read later are the ones item() reads: step 3's micro-batches, without a graph,
    // then through forward_backward (the same parameters: no optimizer step in between).
    double item_mean = 0;
    {
      NoGradGuard no_grad;
      for (int64_t m = 0; m < 4; ++m) {
        auto [x, y] = rows(3, m, 1);
        item_mean += t.model->loss(x, y).item() / 4;
      }
    }
    const double deferred_mean = trainer.forward_backward(3, rows, loss);
    EXPECT_NEAR(deferred_mean, item_mean, 1e-6 * std::abs(item_mean));
    t.zero->zero_grad();
  }
}

TEST(CudaZero, ShardedCheckpointsRoundTripThroughTheHost) {
  ZDL_REQUIRE_GPU();
  testing::TempDir dir;
  auto gpu_comm = local_comm(Device::cuda());
  Trainer saved = make_trainer(gpu_comm, ZeroStage::Three, Device::cuda());
  train_steps(saved, 2, Device::cuda());
  dist::save_sharded(dir / "ck", *saved.zero, *saved.opt, io::TrainState{.step = 2});
  const auto want = states_of(*saved.zero, *saved.opt);
  // Loaded on the GPU under another stage, and on the CPU: the same bits.
  for (Device d : {Device::cuda(), Device::cpu()}) {
    Trainer loaded = make_trainer(local_comm(d), ZeroStage::One, d, /*seed=*/99);
    io::TrainState st = dist::load_sharded(dir / "ck", *loaded.zero, *loaded.opt);
    EXPECT_EQ(st.step, 2);
    EXPECT_EQ(loaded.opt->step_count(), 2);
    EXPECT_TRUE(states_of(*loaded.zero, *loaded.opt) == want) << "states loaded on " << d.str() << " differ from the saved ones";
    // The compute parameters were refreshed from the loaded masters.
    dist::GatheredParameters g(*saved.zero);
    EXPECT_EQ(loaded.model->h[1]->attn->c_attn->weight.to_vector(), saved.model->h[1]->attn->c_attn->weight.to_vector());
  }
}

TEST(CudaZero, GatheredParametersWriteBackOnTheGpu) {
  ZDL_REQUIRE_GPU();
  Trainer t = make_trainer(local_comm(Device::cuda()), ZeroStage::Three, Device::cuda());
  {
    dist::GatheredParameters g(*t.zero, /*modify=*/true);
    t.model->ln_f->weight.fill_(0.5);
  }
  for (const dist::OptimizerShard& shard : t.zero->optimizer_shards())
    for (const dist::Segment& g : shard.segments)
      if (g.slot->name == "ln_f.weight") {
        auto m = shard.master.to_vector();
        for (int64_t i = g.begin; i < g.end; ++i) EXPECT_EQ(m[i - shard.begin], 0.5) << i;
      }
  dist::GatheredParameters g(*t.zero);
  for (double v : t.model->ln_f->weight.to_vector()) EXPECT_EQ(v, 0.5);
}

// ---------------- misplaced runs: clear errors ----------------

TEST(CudaZero, RefusesACommunicatorOnAnotherDevice) {
  ZDL_REQUIRE_GPU();
  auto cpu = local_comm(Device::cpu());
  std::string m = cuda_test::error_text(
      [&] { dist::ZeroPartitioner z(cpu, dist::ZeroOptions{.stage = ZeroStage::Three, .device = Device::cuda()}); });
  EXPECT_NE(m.find("needs a communicator serving cuda:0"), std::string::npos) << m;
  auto gpu = local_comm(Device::cuda());
  m = cuda_test::error_text([&] {
    dist::ZeroPartitioner z(gpu, dist::ZeroOptions{.compute_dtype = DType::F64, .device = Device::cuda()});
  });
  EXPECT_NE(m.find("f32 or bf16"), std::string::npos) << m;
}

}  // namespace zdl

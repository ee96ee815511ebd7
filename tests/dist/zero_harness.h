// Shared harness of the ZeRO tests: the same tiny GPT trained single-process (the reference,
// optim::AdamW on full tensors) and under ZeroPartitioner on the given communicator, on the
// same sequences (each rank computes the micro-batches ZeroPartitioner::micro_batch_index names).
// Used with N = 1 (test_dist) and N = 2, 4, 8 (test_dist_mpi under mpirun).
#pragma once
#include <cmath>
#include <csignal>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/rng.h"
#include "dist/zero/partitioner.h"
#include "dist/zero/trainer.h"
#include "dist/zero/zero_adamw.h"
#include "io/interrupt.h"
#include "nn/activation_checkpoint.h"
#include "nn/batch_position.h"
#include "nn/gpt.h"
#include "optim/clip.h"
#include "optim/optimizer.h"
#include "optim/param_groups.h"

namespace zdl::dist::testing {

struct RunConfig {
  ZeroStage stage = ZeroStage::Three;
  DType dtype = DType::F32;
  int steps = 3;
  // A step covers batch x grad_accum sequences: grad_accum micro-steps of `batch` rows over all
  // ranks (batch / N per rank). One process matches N ranks bit for bit with batch / N rows and
  // grad_accum x N micro-steps (local_equivalent below).
  int grad_accum = 1;
  double clip = 0.05;  // small enough that clipping really scales the updates
  int64_t batch = 4;   // global rows per micro-step
  int64_t seq = 8;
  int prefetch = 1;
  GradReduction reduction = GradReduction::Exact;
  bool no_sync = false;
  double dropout = 0.0;
  // Activation checkpointing of blocks 0, k, 2k, ... (nn::checkpoint_every; 0: off).
  int64_t checkpoint_every = 0;
  // ZeroOptions::is_unit (empty: the default, the Blocks).
  std::function<bool(const nn::Module&)> is_unit;
  uint64_t seed = 7;
  // run_reference only: each step's summed gradient gets noise of this size relative to its
  // tensor's RMS, uniform in [-1, 1] per element (a model of a backward's rounding error; 0: none).
  double grad_noise = 0;
  // This step's gradient of one parameter of unit h.1 gets a NaN on the last rank, before any
  // reduction (a leaf hook): the step must be detected and skipped (-1: none).
  int poison_step = -1;
  // The last rank raises SIGTERM on itself before this step, inside an io::InterruptScope: every
  // rank's StepResult must say so from this step on (-1: none).
  int interrupt_step = -1;
  // Where run_zero places the model (ZeroOptions::device; the communicator must serve it) and
  // feeds the batches.
  Device device = Device::cpu();
  // ZeroOptions::offload (docs/offload.md).
  OffloadOptions offload;
  // ZeroOptions::shard_group (hybrid sharding; 0: all ranks) and secondary_partition (hpZ).
  int shard_group = 0;
  bool secondary_partition = false;
  bool quantize_weights = false;  // ZeroOptions::quantize_weights (qwZ)
  bool quantize_grads = false;    // ZeroOptions::quantize_grads (qgZ)
};

// The same steps as `c` on N ranks, run by one process: micro-batches of batch / N rows, N
// times as many of them.
inline RunConfig local_equivalent(RunConfig c, int n) {
  c.batch /= n;
  c.grad_accum *= n;
  c.shard_group = 0;
  c.secondary_partition = false;
  c.quantize_weights = false;
  c.quantize_grads = false;
  return c;
}

// The seed of dropout masks (a run-level seed, like the data's: a model built from another init
// seed and loaded from a checkpoint draws the same masks).
constexpr uint64_t kDropoutSeed = 4321;

// The parameter whose gradient poison_step corrupts.
constexpr const char* kPoisonedParam = "h.1.mlp.c_fc.weight";

inline nn::GPTConfig tiny_gpt(double dropout = 0.0) {
  return nn::GPTConfig{.vocab_size = 23, .block_size = 8, .n_layer = 3, .n_head = 2, .n_embd = 10, .dropout = dropout};
}

struct RunResult {
  std::vector<double> losses;                          // global mean loss per step
  // Per step: the norm of the whole reduced gradient, its square sum exact (kernels/cpu/square_sum.h),
  // so one gradient element's bits differing anywhere changes it.
  std::vector<double> grad_norms;
  std::map<std::string, std::vector<double>> params;   // final parameters, full
  // Per step: the units ZeroPartitioner reported with non-finite gradients (run_zero only).
  std::vector<std::vector<ZeroPartitioner::NonFiniteUnit>> nonfinite;
  std::vector<int> stop_signals;  // per step: StepResult::stop_signal (run_zero only)
};

// Rows [first, first + count) of step s's sequences: ids from Philox keyed by (s, row), so a
// row is the same however the step is split into ranks and micro-batches.
inline std::pair<Tensor, Tensor> step_rows(const RunConfig& c, int64_t vocab, int s, int64_t first, int64_t count) {
  Philox g(1234, static_cast<uint64_t>(s));
  const int64_t w = c.seq + 1;
  std::vector<int64_t> ids(static_cast<size_t>(count * w));
  for (int64_t i = 0; i < count * w; ++i) ids[static_cast<size_t>(i)] = g.block(static_cast<uint64_t>(first * w + i))[0] % vocab;
  Tensor all = Tensor::from_vector(ids, {count, w}, DType::I64);
  return {contiguous(slice(all, 1, 0, c.seq)), contiguous(slice(all, 1, 1, c.seq + 1))};
}

// Micro-step m of step s, all ranks' rows: [B, T] inputs and targets.
inline std::pair<Tensor, Tensor> global_batch(const RunConfig& c, int64_t vocab, int s, int m) {
  return step_rows(c, vocab, s, m * c.batch, c.batch);
}

inline Tensor rows(const Tensor& t, int rank, int n) {
  int64_t per = t.size(0) / n;
  return contiguous(slice(t, 0, rank * per, (rank + 1) * per));
}

inline optim::AdamWOptions adam_opts() { return {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8}; }

// Adds `g` to a binary-counter stack of pairwise partial sums (the order ZeroPartitioner's exact
// reduction sums micro-batches in); `last` folds the stack into its bottom entry.
inline void pairwise_push(std::vector<std::pair<int, std::vector<Tensor>>>& stack, std::vector<Tensor> g, bool last) {
  int level = 0;
  while (!stack.empty() && stack.back().first == level) {
    for (size_t i = 0; i < g.size(); ++i) {
      add_(stack.back().second[i], g[i]);
      g[i] = stack.back().second[i];
    }
    stack.pop_back();
    ++level;
  }
  stack.push_back({level, std::move(g)});
  while (last && stack.size() > 1) {
    auto top = std::move(stack.back());
    stack.pop_back();
    for (size_t i = 0; i < top.second.size(); ++i) add_(stack.back().second[i], top.second[i]);
  }
}

// g += size * rms(g) * r, r uniform in [-1, 1) per element, for every parameter's gradient.
inline void add_rms_noise(std::vector<Tensor>& params, double size, int step) {
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor g = params[i].grad();
    float* d = g.data<float>();
    const int64_t n = g.numel();
    double sq = 0;
    for (int64_t k = 0; k < n; ++k) sq += double(d[k]) * d[k];
    const double rms = std::sqrt(sq / static_cast<double>(n));
    Philox r(99, static_cast<uint64_t>(step) * 1000 + i);
    for (int64_t k = 0; k < n; ++k) d[k] += static_cast<float>(size * rms * (2.0 * r.uniform(static_cast<uint64_t>(k)) - 1.0));
  }
}

// Single process, plain modules and optim::AdamW, on the micro-batches N ranks would compute
// (batch / n rows each, grad_accum x n of them, summed pairwise in micro-batch order).
inline RunResult run_reference(const RunConfig& c, int n = 1) {
  RunResult r;
  std::shared_ptr<nn::GPT> model;
  {
    nn::InitContext ctx(c.seed, Device::cpu(), c.dtype);
    model = std::make_shared<nn::GPT>(tiny_gpt(c.dropout));
  }
  nn::checkpoint_every(model->h, c.checkpoint_every);
  optim::AdamW opt(optim::decay_groups(*model, 0.1), adam_opts());
  auto params = model->parameters();
  const int64_t b = c.batch / n, M = c.grad_accum * n;
  for (int s = 0; s < c.steps; ++s) {
    double loss_sum = 0;
    std::vector<std::pair<int, std::vector<Tensor>>> stack;
    for (int64_t m = 0; m < M; ++m) {
      auto [x, y] = step_rows(c, model->config.vocab_size, s, m * b, b);
      nn::BatchPosition pos(s, m * b, kDropoutSeed);
      Tensor loss = model->loss(x, y);
      loss_sum += loss.item();
      mul(loss, 1.0 / static_cast<double>(M)).backward();
      std::vector<Tensor> g;
      for (Tensor& p : params) {
        g.push_back(p.grad().contiguous_copy());
        p.set_grad(Tensor());
      }
      pairwise_push(stack, std::move(g), m == M - 1);
    }
    for (size_t i = 0; i < params.size(); ++i) params[i].set_grad(stack.back().second[i]);
    if (c.grad_noise > 0) add_rms_noise(params, c.grad_noise, s);
    r.losses.push_back(loss_sum / static_cast<double>(M));
    if (s == c.poison_step) {  // the skipped step: no update, no optimizer state change
      opt.zero_grad();
      continue;
    }
    double norm = optim::grad_norm(model->parameters());
    r.grad_norms.push_back(norm);
    opt.step(optim::clip_scale(norm, c.clip));
    opt.zero_grad();
  }
  for (auto& [nm, p] : model->named_parameters()) r.params[nm] = p.to_vector();
  return r;
}

// Called after wrap() and after each step with the manager (memory / traffic probes).
struct Probe {
  std::function<void(ZeroPartitioner&)> after_wrap;
  std::function<void(ZeroPartitioner&, int step)> after_step;
};

// The library training step over the harness's sequences and model.
inline Trainer make_trainer(ZeroPartitioner& zero, ZeroAdamW& opt, const RunConfig& c) {
  return Trainer(zero, opt,
                 {.grad_accum = c.grad_accum, .micro_batch = c.batch / zero.comm().size(), .grad_clip = c.clip,
                  .seed = kDropoutSeed});
}
inline Trainer::BatchFn harness_rows(const RunConfig& c, int64_t vocab) {
  return [c, vocab](int64_t s, int64_t first, int64_t count) {
    auto [x, y] = step_rows(c, vocab, static_cast<int>(s), first, count);
    return Trainer::Batch{x.to(c.device), y.to(c.device)};
  };
}
inline Trainer::LossFn gpt_loss(nn::GPT& model) {
  return [&model](const Tensor& x, const Tensor& y) { return model.loss(x, y); };
}

inline RunResult run_zero(Communicator& comm, const RunConfig& c, const Probe& probe = {}) {
  RunResult r;
  std::shared_ptr<Communicator> shared(&comm, [](Communicator*) {});
  ZeroPartitioner zero(shared, ZeroOptions{.stage = c.stage, .compute_dtype = c.dtype, .device = c.device,
                                           .prefetch = c.prefetch, .reduction = c.reduction, .no_sync = c.no_sync,
                                           .shard_group = c.shard_group, .secondary_partition = c.secondary_partition,
                                           .quantize_weights = c.quantize_weights, .quantize_grads = c.quantize_grads,
                                           .offload = c.offload, .is_unit = c.is_unit});
  std::shared_ptr<nn::GPT> model;
  {
    auto scope = zero.placement_scope(c.seed);
    model = std::make_shared<nn::GPT>(tiny_gpt(c.dropout));
  }
  nn::checkpoint_every(model->h, c.checkpoint_every);
  zero.wrap(*model);
  if (probe.after_wrap) probe.after_wrap(zero);
  ZeroAdamW opt(zero, adam_opts(), 0.1);
  const int N = comm.size(), rank = comm.rank();
  int step = 0;
  if (c.poison_step >= 0 && rank == N - 1) {
    for (auto& [n, p] : model->named_parameters())
      if (n == kPoisonedParam)
        p.register_hook([&step, &c](const Tensor& g) {
          if (step != c.poison_step) return g;
          Tensor bad = g.to(Device::cpu()).contiguous_copy();
          if (bad.dtype() == DType::F64) bad.data<double>()[0] = std::nan("");
          else if (bad.dtype() == DType::BF16) bad.data<BFloat16>()[0] = BFloat16(std::nanf(""));
          else bad.data<float>()[0] = std::nanf("");
          return bad.to(g.device());
        });
  }
  Trainer trainer = make_trainer(zero, opt, c);
  std::optional<io::InterruptScope> interrupt;
  if (c.interrupt_step >= 0) interrupt.emplace();
  for (int s = 0; s < c.steps; ++s, ++step) {
    if (s == c.interrupt_step && rank == N - 1) std::raise(SIGTERM);
    StepResult res = trainer.step(s, harness_rows(c, model->config.vocab_size), gpt_loss(*model));
    r.losses.push_back(res.loss);
    if (res.applied) r.grad_norms.push_back(res.grad_norm);
    r.nonfinite.push_back(res.nonfinite);
    r.stop_signals.push_back(res.stop_signal);
    if (probe.after_step) probe.after_step(zero, s);
  }
  {
    GatheredParameters g(zero);
    for (auto& [n, p] : model->named_parameters()) r.params[n] = p.to(DType::F64).to_vector();
  }
  return r;
}

// ||a - b|| / ||b|| (L2), the usual relative error of a tensor.
inline double rel_l2(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return 1e30;
  double diff = 0, norm = 1e-300;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    norm += b[i] * b[i];
  }
  return std::sqrt(diff / norm);
}

// [Note: bf16 against rounding's prediction] How far may a bf16 run drift from the f32 run? Not
// by a constant: by what bf16 rounding predicts. bf16 keeps 8 significant bits (unit roundoff
// u = 2^-8); its backward's error is modelled as noise of u times each gradient tensor's RMS,
// added to every element of the f32 run's gradient at every step (RunConfig::grad_noise). Adam
// turns that noise into parameter drift exactly as it turns bf16's errors into drift (an element
// whose gradient is near zero moves +-lr either way), so the perturbed f32 run predicts the size
// of bf16's drift, and a real bf16 run must stay within it:
//   - all parameters together: ||p_bf16 - p_f32|| <= ||p_predicted - p_f32||;
//   - each step's loss: |loss_bf16 - loss_f32| <= u |loss_f32| (the forward's rounding, summed
//     in f32) + |loss_predicted - loss_f32| (the drift of the steps before).
// Measured on the harness's model at N = 1, 2, 4: parameters drift 0.23-0.26 of the prediction;
// losses 1.8e-4 against an allowance of 1.3e-2 (the u |loss| term is loose while the logits are
// small). What it catches is a bf16 path that is wrong, not one that rounds less well: with
// rounding by truncation planted in the f32 -> bf16 conversion the drift stays below the
// prediction (0.18 of it), because in three Adam steps the drift is the noise's sign flips.
constexpr double kBf16UnitRoundoff = 1.0 / 256;

struct Bf16Prediction {
  RunResult f32, predicted;
};
inline Bf16Prediction bf16_prediction(RunConfig c, int n) {
  c.dtype = DType::F32;
  c.device = Device::cpu();
  Bf16Prediction p;
  p.f32 = run_reference(c, n);
  c.grad_noise = kBf16UnitRoundoff;
  p.predicted = run_reference(c, n);
  return p;
}

// ||a - b|| / ||b|| over all parameters together.
inline double model_rel_l2(const RunResult& a, const RunResult& b) {
  double diff = 0, norm = 1e-300;
  for (auto& [name, v] : b.params) {
    auto it = a.params.find(name);
    if (it == a.params.end() || it->second.size() != v.size()) return 1e30;
    for (size_t i = 0; i < v.size(); ++i) {
      diff += (it->second[i] - v[i]) * (it->second[i] - v[i]);
      norm += v[i] * v[i];
    }
  }
  return std::sqrt(diff / norm);
}

inline void expect_within_bf16_prediction(const RunResult& got, const Bf16Prediction& p, const std::string& what) {
  ASSERT_EQ(got.losses.size(), p.f32.losses.size()) << what;
  for (size_t s = 0; s < p.f32.losses.size(); ++s) {
    const double ref = p.f32.losses[s];
    const double allowed = kBf16UnitRoundoff * std::abs(ref) + std::abs(p.predicted.losses[s] - ref);
    EXPECT_LE(std::abs(got.losses[s] - ref), allowed)
        << what << " step " << s + 1 << ": bf16 loss " << got.losses[s] << " vs f32 " << ref;
  }
  const double drift = model_rel_l2(got, p.f32), predicted = model_rel_l2(p.predicted, p.f32);
  EXPECT_LE(drift, predicted) << what << ": bf16 parameters drift " << drift << " from f32's (relative L2), "
                              << "rounding predicts " << predicted;
}

}  // namespace zdl::dist::testing

// Shared harness of the ZeRO tests: the same tiny GPT trained single-process (the reference,
// optim::AdamW on full tensors) and under ZeroPartitioner on the given communicator, on the
// same global batches (rank r takes rows [r B/N, (r+1) B/N)). Used with N = 1 (test_dist) and
// N = 2, 4 (test_dist_mpi under mpirun).
#pragma once
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/rng.h"
#include "dist/zero.h"
#include "dist/zero_optimizer.h"
#include "nn/gpt.h"
#include "optim/clip.h"
#include "optim/optimizer.h"
#include "optim/param_groups.h"

namespace zdl::dist::testing {

struct RunConfig {
  ZeroStage stage = ZeroStage::Three;
  DType dtype = DType::F32;
  int steps = 3;
  int grad_accum = 1;
  double clip = 0.05;  // small enough that clipping really scales the updates
  int64_t batch = 4;   // global B
  int64_t seq = 8;
  int prefetch = 1;
  bool no_sync = false;
  uint64_t seed = 7;
  // This step's gradient of one parameter of unit h.1 gets a NaN on the last rank, before any
  // reduction (a leaf hook): the step must be detected and skipped (-1: none).
  int poison_step = -1;
  // Where run_zero places the model (ZeroOptions::device; the communicator must serve it) and
  // feeds the batches.
  Device device = Device::cpu();
};

// The parameter whose gradient poison_step corrupts.
constexpr const char* kPoisonedParam = "h.1.mlp.c_fc.weight";

inline nn::GPTConfig tiny_gpt() {
  return nn::GPTConfig{.vocab_size = 23, .block_size = 8, .n_layer = 3, .n_head = 2, .n_embd = 10};
}

struct RunResult {
  std::vector<double> losses;                          // global mean loss per step
  std::map<std::string, std::vector<double>> params;   // final parameters, full
  // Per step: the units ZeroPartitioner reported with non-finite gradients (run_zero only).
  std::vector<std::vector<ZeroPartitioner::NonFiniteUnit>> nonfinite;
};

// Global batch of step s, micro-batch m: ids [B, T+1] from Philox, split into inputs/targets.
inline std::pair<Tensor, Tensor> global_batch(const RunConfig& c, int64_t vocab, int s, int m) {
  Philox g(1234, static_cast<uint64_t>(s * 100 + m));
  std::vector<int64_t> ids(static_cast<size_t>(c.batch * (c.seq + 1)));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = g.block(i)[0] % vocab;
  Tensor all = Tensor::from_vector(ids, {c.batch, c.seq + 1}, DType::I64);
  return {contiguous(slice(all, 1, 0, c.seq)), contiguous(slice(all, 1, 1, c.seq + 1))};
}

inline Tensor rows(const Tensor& t, int rank, int n) {
  int64_t per = t.size(0) / n;
  return contiguous(slice(t, 0, rank * per, (rank + 1) * per));
}

inline optim::AdamWOptions adam_opts() { return {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8}; }

// Single process, full batch, plain modules and optim::AdamW.
inline RunResult run_reference(const RunConfig& c) {
  RunResult r;
  std::shared_ptr<nn::GPT> model;
  {
    nn::InitContext ctx(c.seed, Device::cpu(), c.dtype);
    model = std::make_shared<nn::GPT>(tiny_gpt());
  }
  optim::AdamW opt(optim::decay_groups(*model, 0.1), adam_opts());
  for (int s = 0; s < c.steps; ++s) {
    double loss_sum = 0;
    for (int m = 0; m < c.grad_accum; ++m) {
      auto [x, y] = global_batch(c, model->config.vocab_size, s, m);
      Tensor loss = model->loss(x, y);
      loss_sum += loss.item();
      mul(loss, 1.0 / c.grad_accum).backward();
    }
    r.losses.push_back(loss_sum / c.grad_accum);
    if (s == c.poison_step) {  // the skipped step: no update, no optimizer state change
      opt.zero_grad();
      continue;
    }
    double norm = optim::grad_norm(model->parameters());
    opt.step(optim::clip_scale(norm, c.clip));
    opt.zero_grad();
  }
  for (auto& [n, p] : model->named_parameters()) r.params[n] = p.to_vector();
  return r;
}

// Called after wrap() and after each step with the manager (memory / traffic probes).
struct Probe {
  std::function<void(ZeroPartitioner&)> after_wrap;
  std::function<void(ZeroPartitioner&, int step)> after_step;
};

inline RunResult run_zero(Communicator& comm, const RunConfig& c, const Probe& probe = {}) {
  RunResult r;
  std::shared_ptr<Communicator> shared(&comm, [](Communicator*) {});
  ZeroPartitioner zero(shared, ZeroOptions{.stage = c.stage, .compute_dtype = c.dtype, .device = c.device,
                                           .prefetch = c.prefetch, .no_sync = c.no_sync});
  std::shared_ptr<nn::GPT> model;
  {
    auto scope = zero.placement_scope(c.seed);
    model = std::make_shared<nn::GPT>(tiny_gpt());
  }
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
  for (int s = 0; s < c.steps; ++s, ++step) {
    double loss_sum = 0;
    for (int m = 0; m < c.grad_accum; ++m) {
      auto [x, y] = global_batch(c, model->config.vocab_size, s, m);
      zero.set_grad_sync(m == c.grad_accum - 1);
      Tensor loss = model->loss(rows(x, rank, N).to(c.device), rows(y, rank, N).to(c.device));
      loss_sum += loss.item();
      mul(loss, 1.0 / c.grad_accum).backward();
    }
    r.losses.push_back(comm.all_reduce_sum(loss_sum / c.grad_accum) / N);
    double scale = zero.clip_grad_norm(c.clip);
    r.nonfinite.push_back(std::isfinite(zero.last_grad_norm()) ? std::vector<ZeroPartitioner::NonFiniteUnit>{}
                                                                : zero.nonfinite_grad_units());
    if (r.nonfinite.back().empty()) opt.step(scale);
    zero.zero_grad();
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

}  // namespace zdl::dist::testing

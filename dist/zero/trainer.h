// dist::Trainer: one training step of a model wrapped by a ZeroPartitioner, as train_gpt runs
// it, for any driver: this rank's micro-batches by the partitioner's schedule, each inside an
// nn::BatchPosition (dropout keyed by the data), the step's loss summed in micro-batch order,
// the exact gradient norm and clipping, the optimizer step (skipped, on every rank alike, when
// a loss or a gradient is not finite), zero_grad. Training is then bit-identical across world
// sizes and stages (docs/exactness.md), and resuming needs only the step number: batches and
// dropout masks are functions of it.
//
//   dist::Trainer trainer(zero, opt, {.grad_accum = 2, .micro_batch = 4, .grad_clip = 1.0, .seed = 1337});
//   for (int64_t step = first; step < steps; ++step) {
//     opt.set_lr(schedule.lr(step));
//     dist::StepResult r = trainer.step(step,
//         [&](int64_t s, int64_t first, int64_t count) { return my_rows(s, first, count); },  // (inputs, targets)
//         [&](const Tensor& x, const Tensor& y) { return model->loss(x, y); });
//     if (!r.applied) ...;  // r.nonfinite names the units with NaN/Inf gradients
//     if (r.stop_signal) break;  // Ctrl-C on some rank, inside an io::InterruptScope: save, exit
//   }
#pragma once
#include "core/deferred_read.h"
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "dist/zero/partitioner.h"
#include "dist/zero/zero_adamw.h"

namespace zdl::dist {

struct TrainerOptions {
  int64_t grad_accum = 1;   // micro-steps per optimizer step on each rank (A)
  int64_t micro_batch = 1;  // sequences per rank and micro-step (b): a step covers N x A x b
  double grad_clip = 0.0;   // global gradient-norm clip (0: off)
  uint64_t seed = 0;        // the run's seed for random draws in forward (dropout masks)
};

struct StepResult {
  double loss = 0;       // mean of the step's micro-batch losses: the same double on every rank
  double grad_norm = 0;  // global, before clipping
  bool applied = true;   // false: a loss or gradient was NaN/Inf and the optimizer step was skipped
  std::vector<ZeroPartitioner::NonFiniteUnit> nonfinite;  // when !applied: units with NaN/Inf gradients
  // SIGINT or SIGTERM when any rank was interrupted inside an io::InterruptScope (SIGTERM if
  // both): the same on every rank, so every rank stops after this step together. 0 otherwise.
  int stop_signal = 0;
};

class Trainer {
 public:
  using Batch = std::pair<Tensor, Tensor>;
  // Rows [first, first + count) of step `step`'s sequences: (inputs, targets), where the model
  // runs. The same rows must come back for the same arguments on every call and every rank.
  using BatchFn = std::function<Batch(int64_t step, int64_t first, int64_t count)>;
  // A micro-batch's mean loss (a scalar tensor).
  using LossFn = std::function<Tensor(const Tensor& inputs, const Tensor& targets)>;

  Trainer(ZeroPartitioner& zero, ZeroAdamW& opt, TrainerOptions options);

  // Forward and backward over this rank's micro-batches, clipping, the optimizer step (or the
  // skip), zero_grad. Collective: every rank calls it with the same step.
  StepResult step(int64_t step, const BatchFn& batch, const LossFn& loss);

  // The forward/backward part of step() alone (gradients are reduced when it returns); the
  // step's mean loss. For drivers that look at gradients before stepping.
  double forward_backward(int64_t step, const BatchFn& batch, const LossFn& loss);

  // The mean loss over `num_batches` evaluation batches, over all ranks: batch(i) returns this
  // rank's rows of batch i. `model` runs in eval mode (no dropout) without a graph, and is put
  // back in the mode it was in. Collective (every rank runs the model: ZeRO-3 gathers).
  using EvalBatchFn = std::function<Batch(int64_t index)>;
  double evaluate(nn::Module& model, int64_t num_batches, const EvalBatchFn& batch, const LossFn& loss);

  // N x A x b: the sequences one step trains on.
  int64_t sequences_per_step() const;
  const TrainerOptions& options() const { return options_; }

 private:
  // Forward and backward over this rank's micro-batches; their losses are read later
  // ([Note: reads the host takes later], core/deferred_read.h): on a GPU the step's one host
  // wait is the gradient norm's, and the losses arrive with it.
  struct MicroBatchLosses {
    std::vector<std::pair<size_t, DeferredScalar>> slots;  // (micro-batch slot, its loss)
  };
  MicroBatchLosses run_micro_batches(int64_t step, const BatchFn& batch, const LossFn& loss);
  // The mean loss over every rank's micro-batches, and whether a rank was interrupted
  // (StepResult::stop_signal): one all-reduce.
  std::pair<double, int> reduce_losses(const MicroBatchLosses& losses);

  ZeroPartitioner& zero_;
  ZeroAdamW& opt_;
  TrainerOptions options_;
  bool options_checked_ = false;  // compared across ranks at the first step
};

}  // namespace zdl::dist

#include "dist/zero/trainer.h"

#include <cmath>
#include <csignal>
#include <tuple>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "io/interrupt.h"
#include "nn/batch_position.h"

namespace zdl::dist {

Trainer::Trainer(ZeroPartitioner& zero, ZeroAdamW& opt, TrainerOptions options)
    : zero_(zero), opt_(opt), options_(options) {
  ZDL_CHECK(options_.grad_accum >= 1 && options_.micro_batch >= 1, zero_.comm().prefix(),
            " Trainer: grad_accum and micro_batch must be >= 1, got grad_accum=", options_.grad_accum,
            " micro_batch=", options_.micro_batch);
  ZDL_CHECK(options_.grad_clip >= 0 && std::isfinite(options_.grad_clip), zero_.comm().prefix(),
            " Trainer: grad_clip must be a finite number >= 0, got ", options_.grad_clip);
}

int64_t Trainer::sequences_per_step() const {
  return zero_.comm().size() * options_.grad_accum * options_.micro_batch;
}

double Trainer::forward_backward(int64_t step, const BatchFn& batch, const LossFn& loss_fn) {
  return reduce_losses(run_micro_batches(step, batch, loss_fn)).first;
}

Trainer::MicroBatchLosses Trainer::run_micro_batches(int64_t step, const BatchFn& batch, const LossFn& loss_fn) {
  if (!options_checked_) {
    // Ranks with another grad_accum or micro_batch ran other micro-batches: their collectives
    // fell out of step (a hang until the watchdog, or "ranks diverged" at a misdescribed place).
    zero_.comm().check_same_on_every_rank(
        detail::str("grad_accum=", options_.grad_accum, " micro_batch=", options_.micro_batch,
                    " grad_clip=", options_.grad_clip, " seed=", options_.seed),
        "TrainerOptions");
    options_checked_ = true;
  }
  zero_.set_step(step);
  const int64_t A = options_.grad_accum, b = options_.micro_batch;
  MicroBatchLosses out;
  for (int64_t a = 0; a < A; ++a) {
    const int64_t m = zero_.micro_batch_index(a);
    auto [inputs, targets] = batch(step, m * b, b);
    // Rows are the leading dimension; more or fewer than asked were trained on silently (the
    // micro-batch schedule, dropout positions and the loss's weight assume b).
    for (const Tensor* t : {&inputs, &targets})
      ZDL_CHECK(t->defined() && t->dim() >= 1 && t->shape()[0] == b, zero_.comm().prefix(), " Trainer: the batch "
                "function was asked for rows [", m * b, ", ", m * b + b, ") of step ", step, " and returned ",
                t == &inputs ? "inputs" : "targets", " of shape ", t->defined() ? shape_str(t->shape()) : "(undefined)",
                "; the leading dimension must be the ", b, " rows");
    nn::BatchPosition pos(step, m * b, options_.seed);
    zero_.set_grad_sync(a == A - 1);
    Tensor loss = loss_fn(inputs, targets);
    ZDL_CHECK(loss.defined() && loss.numel() == 1, zero_.comm().prefix(), " Trainer: the loss must be a scalar, got shape ",
              loss.defined() ? shape_str(loss.shape()) : std::string("(undefined)"));
    out.slots.emplace_back(static_cast<size_t>(m), DeferredScalar(loss));
    // 1/A: a power of two scales exactly, so accumulation keeps the bits of one big batch.
    (A > 1 ? mul(loss, 1.0 / static_cast<double>(A)) : loss).backward();
  }
  return out;
}

std::pair<double, int> Trainer::reduce_losses(const MicroBatchLosses& micro) {
  const size_t M = static_cast<size_t>(options_.grad_accum * zero_.comm().size());
  // [Note: micro-batch schedule] in dist/zero/partitioner.h; each loss lands in its micro-batch's
  // slot. Two more slots count the ranks interrupted by SIGINT and by SIGTERM, so the step's one
  // all-reduce also tells every rank whether to stop.
  std::vector<double> losses(M + 2, 0.0);
  for (const auto& [m, loss] : micro.slots) losses[m] = loss.value();
  const int sig = io::interrupt_signal();  // read once: the handler may set it at any time
  losses[M + (sig == SIGTERM ? 1 : 0)] = sig != 0 ? 1.0 : 0.0;
  // One nonzero per slot: the all-reduce is exact; then the sum in micro-batch order.
  CommPhaseScope metrics(CommPhase::Metrics);
  losses = zero_.comm().all_reduce_sums(std::move(losses));
  double sum = 0;
  for (size_t m = 0; m < M; ++m) sum += losses[m];
  const int stop = losses[M + 1] > 0 ? SIGTERM : losses[M] > 0 ? SIGINT : 0;
  return {sum / static_cast<double>(M), stop};
}

double Trainer::evaluate(nn::Module& model, int64_t num_batches, const EvalBatchFn& batch, const LossFn& loss_fn) {
  ZDL_CHECK(num_batches > 0, zero_.comm().prefix(), " Trainer::evaluate: num_batches must be >= 1, got ", num_batches);
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  double total = 0;
  for (int64_t i = 0; i < num_batches; ++i) {
    auto [inputs, targets] = batch(i);
    total += loss_fn(inputs, targets).item();
  }
  model.train(was_training);
  CommPhaseScope metrics(CommPhase::Metrics);
  return zero_.comm().all_reduce_sum(total) / static_cast<double>(num_batches * zero_.comm().size());
}

StepResult Trainer::step(int64_t step, const BatchFn& batch, const LossFn& loss) {
  StepResult r;
  const MicroBatchLosses losses = run_micro_batches(step, batch, loss);
  const double scale = zero_.clip_grad_norm(options_.grad_clip);  // a GPU's one host wait
  std::tie(r.loss, r.stop_signal) = reduce_losses(losses);
  r.grad_norm = zero_.last_grad_norm();
  // The loss and the norm are the same on every rank, so every rank takes the same branch.
  r.applied = std::isfinite(r.loss) && std::isfinite(r.grad_norm);
  if (r.applied) opt_.step(scale);
  else if (!std::isfinite(r.grad_norm)) r.nonfinite = zero_.nonfinite_grad_units();
  zero_.zero_grad();
  return r;
}

}  // namespace zdl::dist

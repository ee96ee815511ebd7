// ZeroPartitioner: DDP and ZeRO-1/2/3 on one partition manager (docs/design.md, mechanisms 3-4).
//
// Life of a model under the manager:
//   1. Build inside `placement_scope()`: register_parameter hands each parameter to the
//      manager's ParameterFactory, which records its init recipe and returns a tensor with no
//      bytes yet (no full copy of the model ever exists under ZeRO-3).
//   2. `wrap(model)` groups parameters into units (each Block, plus a root unit for the rest),
//      lays each unit out as one flat buffer padded to a multiple of N, allocates what the
//      stage keeps, initializes only what this rank owns (bit-identical to the same slice of a
//      single-process init, by the counter-based RNG), and installs the hooks:
//        forward pre-hook    stage 3: all-gather the unit (and prefetch the next)
//        forward post-hook   stage 3: free the unit's full parameters
//        backward pre-hook   stage 3: all-gather the unit again (prefetch the previous);
//                            all stages: make the unit's gradient buffer ready
//        post-backward hook  stage 0: all-reduce grads; 1: reduce-scatter grads (full grads
//                            stay); 2-3: reduce-scatter into the grad shard and free the full
//                            grads; 3: also free the full parameters. The reduction is issued
//                            asynchronously and finished when the next unit's is issued, so it
//                            overlaps the previous unit's backward; backward() returns with
//                            every reduction finished ([Note: overlapped gradient reduction]).
//   3. Per step: forward/backward (set_grad_sync for micro-batches), `clip_grad_norm`, then the
//      ZeroAdamW step (optim on own shards; stages 1-2 all-gather parameters afterwards),
//      `zero_grad`.
//
//   auto comm = dist::init();
//   dist::ZeroPartitioner zero(comm, {.stage = dist::ZeroStage::Three});
//   std::shared_ptr<nn::GPT> model;
//   { auto scope = zero.placement_scope(/*seed=*/1337); model = std::make_shared<nn::GPT>(cfg); }
//   zero.wrap(*model);
//   dist::ZeroAdamW opt(zero, {.lr = 3e-4}, /*weight_decay=*/0.1);
//   model->loss(x, y).backward(); opt.step(zero.clip_grad_norm(1.0)); zero.zero_grad();
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dist/comm/communicator.h"
#include "dist/zero/param_unit.h"
#include "dist/zero/options.h"
#include "nn/module.h"
#include "nn/parameter_factory.h"

namespace zdl::dist {

class ZeroPartitioner {
 public:
  ZeroPartitioner(std::shared_ptr<Communicator> comm, ZeroOptions options);
  ~ZeroPartitioner();
  ZeroPartitioner(const ZeroPartitioner&) = delete;
  ZeroPartitioner& operator=(const ZeroPartitioner&) = delete;

  // While alive, parameters registered on this thread are placed by the manager, initialized
  // from `seed` with per-parameter RNG streams in registration order (as nn::InitContext).
  class PlacementScope {
   public:
    PlacementScope(ZeroPartitioner& z, uint64_t seed);
    ~PlacementScope();

   private:
    nn::ParameterFactoryScope factory_;
    nn::InitContext init_;
  };
  PlacementScope placement_scope(uint64_t seed) { return PlacementScope(*this, seed); }

  // Forms units, allocates and initializes this rank's bytes, installs hooks. Once per manager.
  void wrap(nn::Module& model);

  // Micro-batches: call with false before the backward of every micro-batch but the last.
  // Exact reduction: every micro-batch is reduced; the last one completes the step's pairwise
  // sum. Native: stages 0-1 skip the reduction, stage 2 with no_sync keeps full gradients.
  void set_grad_sync(bool sync) { grad_sync_ = sync; }

  // [Note: micro-batch schedule] A step of A micro-steps on N ranks covers M = N x A
  // micro-batches, numbered in data order (micro-batch m holds the step's sequences
  // [m b, (m+1) b) for b sequences per rank and micro-step). At micro-step a this rank
  // computes micro-batch a N + bit_reverse(rank) under exact reduction (the leaf its place
  // in the reduction tree stands for; N a power of two), a N + rank otherwise. One process
  // with A = M computes the same micro-batches in order.
  int64_t micro_batch_index(int64_t micro_step) const;

  // Global gradient norm over the reduced gradients (one all-reduce of the shards' sum of
  // squares for stages 1-3); returns the factor to pass to the optimizer step so the norm
  // is at most max_norm (1 when max_norm <= 0 or already below). The norm: last_grad_norm().
  // A NaN or Inf anywhere in the gradients makes the norm non-finite on every rank (the same
  // all-reduce detects it: no extra collective on healthy steps).
  double clip_grad_norm(double max_norm);
  double last_grad_norm() const { return last_grad_norm_; }

  // After clip_grad_norm found a non-finite norm: the units whose gradients hold a NaN or Inf,
  // with the number of ranks whose shard of that unit does. Stages 1-3 with N > 1: one
  // all-reduce of a flag per unit, so every rank calls it (they all saw the same norm); stage 0:
  // local, the gradients being the same on every rank.
  struct NonFiniteUnit {
    std::string name;
    int ranks = 0;
  };
  std::vector<NonFiniteUnit> nonfinite_grad_units();

  // Waits for the gradient reduction still in flight (if any) and stores its result. backward()
  // already did; the optimizer calls it before reading gradients.
  void wait_for_reductions();
  // Throws, naming the unit, if some unit's gradients are not reduced yet ([Note: unit
  // lifecycle]); `what` names the caller that needs them.
  void check_gradients_complete(const char* what) const;

  // Zeroes the reduced gradients (after the optimizer step).
  void zero_grad();

  // Called by the optimizer after it updated the masters: refreshes the compute-dtype
  // parameters (casts; stages 1-2 all-gather them).
  void after_optimizer_step();

  // Recomputes the compute-dtype parameters from the masters (casts; stages 1-2 all-gather
  // them) without counting a step: after the masters were written from outside the optimizer
  // (dist::load_sharded). Collective.
  void refresh_params();

  // Receives a TraceEvent at every unit event (nullptr: off). For timelines and memory plots.
  void set_trace(std::function<void(const TraceEvent&)> sink) { trace_ = std::move(sink); }
  void emit(TraceKind kind, const ParamUnit* u);

  Communicator& comm() { return *comm_; }
  const ZeroOptions& options() const { return options_; }
  ZeroStage stage() const { return options_.stage; }
  const StagePolicy& policy() const { return policy_; }
  std::vector<std::unique_ptr<ParamUnit>>& units() { return units_; }
  int64_t num_parameters() const;  // Psi (unpadded)
  int64_t num_padded() const;      // sum of padded unit sizes
  // The training step the divergence check reports (Trainer::step and load_sharded set it;
  // otherwise it counts optimizer steps).
  int64_t step() const { return step_; }
  void set_step(int64_t step) { step_ = step; }

 private:
  class Factory;
  friend class GatheredParameters;

  ParamUnit& make_unit(const std::string& name, const std::vector<std::pair<std::string, Tensor>>& params);
  void allocate(ParamUnit& u);
  // Collective: throws on every rank, naming the first difference, unless all built the same units.
  void check_same_units();
  void install_hooks(nn::Module& m, ParamUnit* u);
  void on_forward_pre(ParamUnit& u);
  void on_forward_post(ParamUnit& u);
  void on_backward_pre(ParamUnit& u);
  void on_post_backward(ParamUnit& u);
  void gather(ParamUnit& u, CommPhase phase, bool wait);
  void prefetch(int from, int direction, CommPhase phase);
  void prepare_grads(ParamUnit& u);
  void reduce_grads(ParamUnit& u);
  // A unit's gradient reduction in flight: `reduced` receives its shard (stages 1-3).
  struct PendingReduce {
    ParamUnit* unit;
    std::shared_ptr<Work> work;
    Tensor reduced;
    bool last = true;  // the step's last micro-batch (exact reduction completes the sum)
  };
  // Exact reduction: adds a micro-batch's reduced gradients to the unit's pairwise partial sums
  // and, on the last micro-batch, stores the step's gradient.
  void accumulate_exact(ParamUnit& u, const Tensor& reduced, bool last);
  bool exact() const { return options_.reduction == GradReduction::Exact; }

  // Divergence check: every rank must be at the same (event, unit) here.
  void agree(int event, const ParamUnit* u);
  std::string describe(int64_t tag) const;

  std::shared_ptr<Communicator> comm_;
  ZeroOptions options_;
  StagePolicy policy_;  // from options_.stage, once
  std::unique_ptr<Factory> factory_;
  std::vector<std::unique_ptr<ParamUnit>> units_;  // blocks in order, root last
  std::vector<ParamUnit*> block_order_;             // units other than the root, forward order
  bool wrapped_ = false;
  bool grad_sync_ = true;
  std::optional<PendingReduce> pending_reduce_;  // at most one in flight
  int64_t step_ = 0;
  double last_grad_norm_ = 0.0;
  std::vector<double> unit_grad_sq_;  // this rank's sum of squares per unit, from clip_grad_norm
  std::function<void(const TraceEvent&)> trace_;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

// Gathers the full parameters of every unit while alive, so they can be read outside
// forward/backward (inspection, export, evaluation code). With modify = true, values written to
// the parameters are copied back into this rank's masters and shards on exit; without it, a
// write is an error when the scope ends (it would be lost). Collective: every rank must enter
// and leave it together.
//
//   { dist::GatheredParameters g(zero); io::export_gpt2(*model, "model.safetensors"); }
class GatheredParameters {
 public:
  explicit GatheredParameters(ZeroPartitioner& z, bool modify = false);
  ~GatheredParameters() noexcept(false);
  GatheredParameters(const GatheredParameters&) = delete;
  GatheredParameters& operator=(const GatheredParameters&) = delete;

 private:
  ZeroPartitioner& z_;
  bool modify_;
  std::vector<ParamUnit*> gathered_;
  uint64_t fingerprint_ = 0;  // read-only: the parameters' bytes on entry
};

}  // namespace zdl::dist

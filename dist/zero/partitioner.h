// ZeroPartitioner: DDP and ZeRO-1/2/3 on one partition manager (docs/design.md, mechanisms 3-4).
//
// Life of a model under the manager:
//   1. Build inside `placement_scope()`: register_parameter hands each parameter to the
//      manager's ParameterFactory, which records its init recipe and returns a tensor with no
//      bytes yet (no full copy of the model ever exists under ZeRO-3).
//   2. `wrap(model)` groups parameters into units (each Block, plus a root unit for the rest;
//      dist/zero/param_unit.h: each lays itself out as one flat buffer padded to a multiple of
//      N, allocates what the stage keeps and initializes only what this rank owns,
//      bit-identical to the same slice of a single-process init) and installs the hooks, which
//      call the unit's own transitions; the manager adds the order between units (prefetch,
//      one reduction in flight) and the divergence check:
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
//      ZeroAdamW step (it reads each unit's OptimizerShard, updates it, and tells the manager
//      once: stages 1-2 then all-gather the parameters), `zero_grad`.
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
#include <string>
#include <vector>

#include "dist/comm/communicator.h"
#include "dist/offload/optimizer_window.h"
#include "dist/zero/options.h"
#include "dist/zero/param_unit.h"
#include "dist/zero/trace.h"
#include "nn/module.h"
#include "nn/parameter_factory.h"

namespace zdl::dist {

class ZeroPartitioner {
 public:
  ZeroPartitioner(std::shared_ptr<Communicator> comm, ZeroOptions options);
  // Unregisters its hooks: a model that outlives the manager runs without them.
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
  // in the reduction tree stands for; N a power of two; hybrid sharding:
  // a N + bit_reverse(rank mod K) + K bit_reverse(rank / K)), a N + rank otherwise. One process
  // with A = M computes the same micro-batches in order.
  int64_t micro_batch_index(int64_t micro_step) const;

  // Global gradient norm over the reduced gradients (one all-reduce of the shards' sum of
  // squares for stages 1-3); returns the factor to pass to the optimizer step so the norm
  // is at most max_norm (1 when max_norm <= 0 or already below). The norm: last_grad_norm().
  // A NaN or Inf anywhere in the gradients makes the norm non-finite on every rank (the same
  // all-reduce detects it: no extra collective on healthy steps).
  double clip_grad_norm(double max_norm);
  double last_grad_norm() const { return last_grad_norm_; }
  // Whether unit i's backward ran since the last zero_grad (a unit a step skipped got no
  // gradient: the optimizer leaves it, as a plain optimizer leaves parameters without one).
  bool unit_has_gradients(size_t i) const;

  // After clip_grad_norm found a non-finite norm: the units whose gradients hold a NaN or Inf,
  // with the number of ranks whose shard of that unit does. Stages 1-3 with N > 1: one
  // all-reduce of a flag per unit, so every rank calls it (they all saw the same norm); stage 0:
  // local, the gradients being the same on every rank.
  struct NonFiniteUnit {
    std::string name;
    int ranks = 0;
  };
  std::vector<NonFiniteUnit> nonfinite_grad_units();

  // Zeroes the reduced gradients (after the optimizer step).
  void zero_grad();

  // ---- the optimizer's side ----
  // Every unit's OptimizerShard (master and reduced gradient), in units() order: fixed at
  // wrap(), so an optimizer sizes its state from them and a checkpoint reads and writes them.
  // Throws before wrap() (an optimizer built then had no state, and failed only at its step).
  std::vector<OptimizerShard> optimizer_shards() const;
  // Before an optimizer step: waits for a reduction still in flight and throws, naming the unit
  // and `what` (the caller), if some unit's gradients are not reduced yet ([Note: unit
  // lifecycle]). Then the shards above hold this step's gradients.
  void begin_optimizer_step(const char* what);
  // After the optimizer updated unit i's master (units() order, every unit once per step): the
  // unit's compute-dtype parameters are refreshed from it (casts; stages 1-2 all-gather them).
  // Called unit by unit, while an offloaded master is still in memory. Collective under stages 1-2.
  void refresh_params(size_t i);
  // After every unit was refreshed: finishes offload writes and counts the step.
  void end_optimizer_step();
  // Every unit's refresh without counting a step: after the masters were written from outside
  // the optimizer (dist::load_sharded). Collective.
  void refresh_params();
  // Offload (ZeroOptions::offload): the rank's NVMe store, or null.
  NvmeStore* nvme_store() const { return nvme_.get(); }
  // Optimizer offload: the optimizer's own offloaded states per unit (ZeroAdamW's moments), in
  // units() order, or {} to forget them (the optimizer's destructor). The manager settles them
  // with the unit's master and, with OffloadOptions::window_bytes, moves them in its window.
  void set_optimizer_states(std::vector<std::vector<OffloadedBuffer*>> per_unit);
  // The window, or null (no optimizer offload, no budget, or no optimizer states yet).
  const OptimizerWindow* optimizer_window() const { return window_.get(); }

  // Receives a TraceEvent at every unit event (nullptr: off). For timelines and memory plots.
  void set_trace(std::function<void(const TraceEvent&)> sink) { trace_ = std::move(sink); }

  Communicator& comm() { return *comm_; }
  // The ranks the model states are sharded over (comm() unless hybrid sharding), and under hybrid
  // sharding the ranks holding the same shard (else null). [Note: shard groups]
  Communicator& shard_group() { return *shards_; }
  Communicator* replicas() { return replicas_.get(); }
  const ZeroOptions& options() const { return options_; }
  ZeroStage stage() const { return options_.stage; }
  const StagePolicy& policy() const { return context_.policy; }
  // The units, blocks in forward order and the root last. Read-only: their states change
  // through the hooks and the calls above.
  std::vector<const ParamUnit*> units() const;
  int64_t num_parameters() const;  // Psi (unpadded)
  int64_t num_padded() const;      // sum of padded unit sizes
  // The training step the divergence check reports (Trainer::step and load_sharded set it;
  // otherwise it counts optimizer steps).
  int64_t step() const { return step_; }
  void set_step(int64_t step) { step_ = step; }

 private:
  class Factory;
  friend class GatheredParameters;

  void check_offload_options() const;
  void make_shard_groups();
  void make_node_group();
  void check_quantization() const;
  void settle_offload();
  void settle_unit(size_t i);  // unit i's offloaded buffers and the optimizer's states of it
  ParamUnit& make_unit(const std::string& name, const std::vector<std::pair<std::string, Tensor>>& params);
  // Collective: throws on every rank, naming the first difference, unless all built the same units.
  void check_same_units();
  std::string options_signature() const;
  void install_hooks(nn::Module& m, ParamUnit* u);
  void on_forward_pre(ParamUnit& u);
  void on_forward_post(ParamUnit& u);
  void on_backward_pre(ParamUnit& u);
  void on_post_backward(ParamUnit& u);
  void prefetch(int from, int direction, CommPhase phase);
  int position(const ParamUnit& u) const;  // in block_order_; -1 for the root
  void reduce(ParamUnit& u);
  // Finishes the gradient reduction still in flight (if any). backward() already did.
  void finish_reduction();
  void check_gradients_complete(const char* what) const;
  // A write found in a read-only GatheredParameters after its scope ended: thrown here, at the
  // next call that trains.
  void throw_deferred_error();
  void emit(TraceKind kind, const ParamUnit* u, std::optional<std::chrono::steady_clock::time_point> at = std::nullopt);

  // Divergence check: every rank must be at the same (event, unit) here.
  void agree(int event, const ParamUnit* u);
  std::string describe(int64_t tag) const;

  std::shared_ptr<Communicator> comm_;
  ZeroOptions options_;
  std::shared_ptr<Communicator> shards_, replicas_;  // [Note: shard groups]
  std::shared_ptr<Communicator> node_group_;         // hpZ, qgZ: shards_'s ranks on this node
  std::shared_ptr<Communicator> across_nodes_;       // qgZ: shards_'s ranks with this node rank
  std::unique_ptr<NvmeStore> nvme_;  // before context_, which points at it
  std::vector<std::vector<OffloadedBuffer*>> optimizer_states_;  // per unit, from the optimizer
  std::unique_ptr<OptimizerWindow> window_;
  UnitContext context_;  // what every unit is given (the policy from options_.stage, once)
  std::unique_ptr<Factory> factory_;
  std::vector<std::unique_ptr<ParamUnit>> units_;  // blocks in order, root last
  std::vector<ParamUnit*> block_order_;             // units other than the root, forward order
  std::vector<nn::HookHandle> hooks_;
  bool wrapped_ = false;
  bool grad_sync_ = true;
  ParamUnit* reducing_ = nullptr;  // the unit whose reduction is in flight (at most one)
  int64_t step_ = 0;
  size_t refreshed_ = 0;  // units refreshed in this optimizer step
  double last_grad_norm_ = 0.0;
  std::vector<double> unit_grad_sq_;  // this rank's sum of squares per unit, from clip_grad_norm
  std::string deferred_error_;
  std::function<void(const TraceEvent&)> trace_;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

// Gathers the full parameters of every unit while alive, so they can be read outside
// forward/backward (inspection, export, evaluation code). With modify = true, values written to
// the parameters are copied back into this rank's masters and shards when the scope ends;
// without it, a write is an error (it would be lost): release() throws it, and a scope that
// ends without release() reports it on stderr and makes the manager's next training call
// throw it. Collective: every rank must enter and leave it together.
//
//   { dist::GatheredParameters g(zero); io::export_gpt2(*model, "model.safetensors"); }
class GatheredParameters {
 public:
  explicit GatheredParameters(ZeroPartitioner& z, bool modify = false);
  ~GatheredParameters();
  GatheredParameters(const GatheredParameters&) = delete;
  GatheredParameters& operator=(const GatheredParameters&) = delete;
  // Ends the scope now: writes back (modify) or checks that nothing was written (throws if
  // something was), then frees what it gathered. Collective.
  void release();

 private:
  // Ends the scope; returns the error of a write in a read-only scope ("" if none).
  std::string end_scope();

  ZeroPartitioner& z_;
  bool modify_;
  bool released_ = false;
  std::vector<ParamUnit*> gathered_;
  uint64_t fingerprint_ = 0;  // read-only: the parameters' bytes on entry
};

}  // namespace zdl::dist

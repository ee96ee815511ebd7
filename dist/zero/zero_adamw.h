// ZeroAdamW: AdamW on the flat shards of a ZeroPartitioner (docs/design.md, mechanism 4).
//
// A plain optimizer over a narrow view: each unit's OptimizerShard (master, reduced gradient,
// the parameter segments they hold), taken once from the manager. A step tells the manager it
// begins (the gradients must be reduced) and that it is done (the manager then refreshes the
// compute-dtype parameters; stages 1-2 all-gather them); it never reaches into a unit.
// Each rank updates only the elements it owns (stage 0: all of them): one fused loop per
// parameter segment, with the decoupled weight decay of that parameter (matrices only, as
// GPT-2 training does). On a GPU (ZeroOptions::device) one kernel per unit updates all its
// segments (kernels/cuda/optim.h), from a table of (offset, size, decay) chunks built at the
// first step and kept on the device. The moments are this optimizer's, allocated when it is
// made on the master's device: f32 (f64 for f64 runs), sized like the master: full under DDP, 1/N
// otherwise. With optimizer offload to nvme they live in the manager's NVMe store and are brought
// in one unit ahead of their update ([Note: the step unit by unit]); with offload to cpu on a GPU
// the master is a host buffer, so the moments live on the host too and the CPU loop updates them
// ([Note: host tier] in param_unit.cpp). The manager must outlive the optimizer.
//
//   dist::ZeroAdamW opt(zero, {.lr = 3e-4, .beta1 = 0.9, .beta2 = 0.95}, /*weight_decay=*/0.1);
//   opt.set_lr(sched.lr(step)); opt.step(zero.clip_grad_norm(1.0)); zero.zero_grad();
#pragma once
#include <array>
#include <memory>
#include <vector>

#include "dist/zero/partitioner.h"
#include "optim/optimizer.h"

namespace zdl::dist {

class ZeroAdamW {
 public:
  ZeroAdamW(ZeroPartitioner& zero, const optim::AdamWOptions& options, double weight_decay);
  ~ZeroAdamW();  // the manager forgets the moments' offloaded buffers
  ZeroAdamW(const ZeroAdamW&) = delete;
  ZeroAdamW& operator=(const ZeroAdamW&) = delete;

  void step(double grad_scale = 1.0);
  double lr() const { return options_.lr; }
  // Throws unless lr is a finite number >= 0.
  void set_lr(double lr);
  int64_t step_count() const { return step_; }
  void set_step_count(int64_t s) { step_ = s; }

  // Adam's first and second moments of unit i (zero.units()[i]), indexed like its
  // OptimizerShard's master:
  // f32 (f64 for f64 runs), full size under DDP, this rank's shard otherwise. Checkpoints read
  // and write them here.
  const Tensor& exp_avg(size_t unit) const { return moments_.at(unit)[0]; }
  const Tensor& exp_avg_sq(size_t unit) const { return moments_.at(unit)[1]; }
  // Offload (ZeroOptions::offload): the buffers to bring in (dist::Resident) before unit i's
  // master or moments above are read or written; empty without offload.
  std::vector<OffloadedBuffer*> offloaded_states(size_t unit) const;

 private:
  // Device runs: each unit's chunk table (kernels::cuda::AdamWChunk entries, 3 words each) and
  // its entry count, built at the first step.
  void build_device_tables();
  void update(size_t unit, double grad_scale);  // AdamW on unit i's master and moments

  ZeroPartitioner& zero_;
  std::vector<OptimizerShard> shards_;          // per unit: what this rank updates
  std::vector<std::array<Tensor, 2>> moments_;  // per unit: exp_avg, exp_avg_sq
  // Optimizer offload: the moments' buffers in the NVMe store, per unit (empty without it).
  std::vector<std::array<std::unique_ptr<OffloadedBuffer>, 2>> offloaded_moments_;
  optim::AdamWOptions options_;
  double weight_decay_;
  int64_t step_ = 0;
  std::vector<Tensor> device_chunks_;
  std::vector<int64_t> device_chunk_counts_;
};

}  // namespace zdl::dist

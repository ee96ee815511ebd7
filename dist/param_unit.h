// ParamUnit: one group of parameters sharded as a single flat buffer (DESIGN.md mechanism 4).
//
// Layout: the unit's parameters concatenated in registration order, padded to a multiple of
// the world size N; rank r owns block r ("shard") of size padded / N. Every parameter tensor is
// a view into `full` (one Storage for the unit, never replaced): ZeRO-3 releases and
// re-materializes that Storage, so tensors saved for backward see the re-gathered bytes.
//
// Buffers (Psi_u = unit elements, s = compute element size):
//   full        Psi_u (padded) x s   Parameter      stage 0-2 always; stage 3 only while gathered
//   param_shard Psi_u/N x s          ParameterShard stage 3 (the gather's source)
//   master      f32 copy the optimizer updates: a view of full (stage 0-2, f32) or of
//               param_shard (stage 3, f32), else its own OptimizerState buffer
//   grad_full   Psi_u x s            Gradient       stage 0-1 always; 2-3 between a unit's
//                                                    backward and its reduce-scatter
//   grad_shard  Psi_u/N x s          GradientShard  stage 2-3 (stage 1: a view of grad_full)
//   exp_avg, exp_avg_sq  master-sized OptimizerState (stage 0: full size; 1-3: shard size)
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "dist/zero_config.h"
#include "nn/init.h"

namespace zdl::dist {

// One parameter's place in its unit.
struct ParamSlot {
  Tensor param;        // the module's tensor (a view into the unit's full buffer)
  std::string name;    // full dotted name
  int64_t offset = 0;  // elements into the unit's flat buffer
  int64_t numel = 0;
  nn::Init init;
  uint64_t seed = 0, stream = 0;
  bool decay = false;  // weight decay applies (matrices)
};

class ParamUnit {
 public:
  std::string name;  // "h.3", or "<root>"
  int index = 0;
  std::vector<ParamSlot> slots;
  int64_t numel = 0;       // unpadded elements
  int64_t padded = 0;      // multiple of N
  int64_t shard_size = 0;  // padded / N
  int64_t shard_begin = 0; // rank * shard_size

  Storage full;         // [padded] compute dtype
  Tensor full_flat;     // view of full
  Tensor param_shard;   // stage 3
  Tensor master;        // see above; [padded] for stage 0, [shard] otherwise
  int64_t master_begin = 0;  // element of the unit the master starts at (0 or shard_begin)
  bool separate_master = false;  // master has its own buffer (mixed precision): cast after updates
  Storage grad_full;    // [padded] compute dtype
  Tensor grad_flat;     // view of grad_full
  Tensor grad_shard;    // [shard] (stage 1: view of grad_flat's own block)
  Tensor exp_avg, exp_avg_sq;
  // Exact reduction, gradient accumulation: this step's reduced micro-batch gradients summed
  // pairwise so far (a binary counter: entry i sums 2^level micro-batches; levels decrease).
  struct PartialSum {
    int level;
    Tensor sum;
  };
  std::vector<PartialSum> grad_partials;

  bool gathered() const { return !full->is_released() && !pending_; }
  bool gathering() const { return pending_ != nullptr; }
  // Starts the all-gather of the full parameters (materializing `full`); no-op if present.
  void unshard_async(Communicator& comm);
  // Waits for a pending all-gather.
  void wait_unshard();
  // Frees the full parameters (stage 3).
  void reshard();

 private:
  std::shared_ptr<Work> pending_;
};

}  // namespace zdl::dist

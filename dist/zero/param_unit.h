// ParamUnit: one group of parameters sharded as a single flat buffer (docs/design.md, mechanism 4).
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

#include "dist/comm/communicator.h"
#include "dist/zero/options.h"
#include "nn/init.h"

namespace zdl::dist {

// [Note: unit lifecycle] A unit's full parameters and its gradients each move through a few
// states, and only the methods named here move them:
//   parameters  Sharded --unshard_async--> Gathering --wait_unshard--> Gathered --reshard--> Sharded
//               (ZeRO-3; under stages 0-2 a unit stays Gathered)
//   gradients   Empty --prepare (backward pre-hook)--> Accumulating --start reduction--> Reducing
//               --finish--> Reduced (the step's last micro-batch) or Accumulating (more to come);
//               zero_grad --> Empty
// The partitioner checks the states where a wrong order would corrupt results silently (an
// optimizer step on gradients still accumulating, a reduction started twice).
enum class ParamState : uint8_t { Sharded, Gathering, Gathered };
enum class GradState : uint8_t { Empty, Accumulating, Reducing, Reduced };
const char* state_name(ParamState s);
const char* state_name(GradState s);

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

// Unit elements [begin, end) that belong to parameter `slot` (padding belongs to none).
struct Segment {
  const ParamSlot* slot;
  int64_t begin, end;
  int64_t numel() const { return end - begin; }
  int64_t param_begin() const { return begin - slot->offset; }  // the same range in the parameter
  int64_t param_end() const { return end - slot->offset; }
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
  // Exact reduction, gradient accumulation: this step's reduced micro-batch gradients summed
  // pairwise so far (a binary counter: entry i sums 2^level micro-batches; levels decrease).
  struct PartialSum {
    int level;
    Tensor sum;
  };
  std::vector<PartialSum> grad_partials;

  // The parameters' parts of unit elements [begin, end), in layout order.
  std::vector<Segment> segments(int64_t begin, int64_t end) const;
  // Rank r's block (its shard under stages 1-3): what rank r saves in a checkpoint.
  std::vector<Segment> shard_segments(int r) const { return segments(r * shard_size, (r + 1) * shard_size); }
  // What this rank's optimizer updates: the master's range (stage 0: the whole unit; else the
  // own shard). Element e of a segment is element e - master_begin of the master and moments.
  std::vector<Segment> owned_segments() const { return segments(master_begin, master_begin + master.numel()); }

  ParamState param_state() const { return param_state_; }
  bool gathered() const { return param_state_ == ParamState::Gathered; }
  bool gathering() const { return param_state_ == ParamState::Gathering; }
  // Sharded -> Gathering: materializes `full` and starts the all-gather (no-op otherwise).
  void unshard_async(Communicator& comm);
  // Gathering -> Gathered: waits for the all-gather (no-op otherwise).
  void wait_unshard();
  // -> Sharded: frees the full parameters (waits for a pending all-gather first). ZeRO-3 only.
  void reshard();
  // The state a freshly allocated unit starts in (wrap()): Sharded under ZeRO-3, else Gathered.
  void set_initial_param_state(ParamState s) { param_state_ = s; }

  GradState grad_state = GradState::Empty;  // moved by ZeroPartitioner (see the note above)

 private:
  ParamState param_state_ = ParamState::Gathered;
  std::shared_ptr<Work> pending_;
};

}  // namespace zdl::dist

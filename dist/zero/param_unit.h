// ParamUnit: one group of parameters sharded as a single flat buffer, and the only code that
// changes that buffer's state (docs/design.md, "One ZeRO-3 step of one unit").
//
// Layout: the unit's parameters concatenated in registration order, padded to a multiple of
// the world size N; rank r owns block r ("shard") of size padded / N. Under hybrid sharding
// (ZeroOptions::shard_group K) the unit is cut into K blocks instead, and rank r owns block r mod K
// (its place in its group); the padding stays a multiple of N, so a shard splits evenly again over
// the N / K replicas that all-reduce it. Every parameter tensor is
// a view into the full buffer (one Storage for the unit, never replaced): ZeRO-3 releases and
// re-materializes that Storage, so tensors saved for backward see the re-gathered bytes.
//
// Buffers (Psi_u = unit elements, s = compute element size), chosen once by allocate():
//   full        Psi_u (padded) x s   Parameter      stage 0-2 always; stage 3 only while gathered
//   param_shard Psi_u/N x s          ParameterShard stage 3 (the gather's source)
//   master      f32 copy the optimizer updates: a view of full (stage 0-2, f32) or of
//               param_shard (stage 3, f32), else its own OptimizerState buffer
//   grad_full   Psi_u x s            Gradient       stage 0-1 always; 2-3 between a unit's
//                                                    backward and its reduce-scatter
//   grad_shard  Psi_u/N x s          GradientShard  stage 2-3 (stage 1: a view of grad_full)
//   secondary   Psi_u/R x s          ParameterShard hpZ (stage 3): from a unit's forward to its
//                                                    backward, R = the group's ranks on this node
//   exchange    master-sized x s     GradientShard  optimizer offload to cpu on a GPU: page-locked
//               host memory carrying the reduced gradients down and the new parameters up
//               ([Note: host tier] in param_unit.cpp); the master is then always a host buffer
// Adam's moments are the optimizer's (dist/zero/zero_adamw.h), shaped like the master.
// Offload (docs/offload.md): with StagePolicy::params_on_nvme the param_shard, and with
// optimizer_on_nvme a separate master, live in the rank's NVMe store between uses
// (dist/offload/offloaded_buffer.h); the unit brings them in around each use.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/device_copy.h"
#include "dist/comm/communicator.h"
#include "dist/offload/offloaded_buffer.h"
#include "dist/zero/options.h"
#include "dist/zero/trace.h"
#include "nn/init.h"

namespace zdl::dist {

// [Note: unit lifecycle] A unit's full parameters and its gradients each move through a few
// states, and only ParamUnit's methods move them:
//   parameters  Sharded --unshard--> Unsharding --wait_unshard--> Unsharded --reshard--> Sharded
//               (ZeRO-3; under stages 0-2 a unit stays Unsharded)
//   gradients   Empty --begin_backward--> Accumulating --start_reduce--> Reducing
//               --finish_reduce--> Reduced (the step's last micro-batch) or Accumulating;
//               zero_grad --> Empty
//   training    Idle --begin_forward--> Forward --end_forward--> Idle --begin_backward-->
//               PreBackward --end_backward--> PostBackward --zero_grad--> Idle
// A transition that would corrupt results silently (an optimizer step on gradients still
// accumulating, a backward over a reduction in flight) throws, naming the unit and its state.
enum class ParamState : uint8_t { Sharded, Unsharding, Unsharded };
enum class GradState : uint8_t { Empty, Accumulating, Reducing, Reduced };
enum class TrainingState : uint8_t { Idle, Forward, PreBackward, PostBackward };
const char* state_name(ParamState s);
const char* state_name(GradState s);
const char* state_name(TrainingState s);

// One parameter's place in its unit.
struct ParamSlot {
  Tensor param;        // the module's tensor (a view into the unit's full buffer)
  std::string name;    // full dotted name
  int64_t offset = 0;  // elements into the unit's flat buffer (set by ParamUnit)
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

class ParamUnit;

// What a unit needs from outside, fixed when the partition manager is made: no unit holds a
// pointer back to the manager.
struct UnitContext {
  Communicator* comm = nullptr;      // every rank: error prefixes, DDP's all-reduce
  // The ranks a unit is sharded over: comm itself, or under hybrid sharding
  // (ZeroOptions::shard_group) this rank's group; the gathers and reduce-scatters run on it.
  Communicator* shards = nullptr;
  // Hybrid sharding: the ranks holding the same shard (one per group), over which the reduced
  // shard is all-reduced; null without it.
  Communicator* replicas = nullptr;
  // The ranks of `shards` on this rank's node (hpZ or qgZ; else null). With secondary_partition
  // (ZeroOptions::secondary_partition, ZeRO++'s hpZ), a unit's gathers after its forward run on
  // it ([Note: secondary partition]).
  Communicator* node_group = nullptr;
  bool secondary_partition = false;
  // ZeRO++'s qgZ (ZeroOptions::quantize_grads): the group's ranks with this rank's place on its
  // node; with node_group, the two hops of dist/zero/quantized_reduce.h. Null: off.
  Communicator* across_nodes = nullptr;
  // ZeRO++'s qwZ (ZeroOptions::quantize_weights): the forward's and backward's gathers move int8
  // codes ([Note: quantized gather]).
  bool quantize_weights = false;
  StagePolicy policy;
  DType compute_dtype = DType::F32;
  Device device = Device::cpu();
  GradReduction reduction = GradReduction::Exact;
  bool no_sync = false;
  // The rank's scratch store when the policy offloads to NVMe (else null).
  NvmeStore* nvme = nullptr;
  // Called before every collective a unit issues, with its phase (the divergence check).
  std::function<void(CommPhase, const ParamUnit&)> before_collective;
  // Called at the unit's gather and reduction events (the step's trace), at the moment they
  // happen, or at `at` for one reported later (GatherFinished).
  std::function<void(TraceKind, const ParamUnit&, std::optional<std::chrono::steady_clock::time_point> at)> trace;
};

// What the optimizer updates of one unit, and what a checkpoint reads and writes: the master
// (f32; f64 for f64 runs) and the reduced gradient, indexed alike. Element e of a segment is
// element e - begin of both.
struct OptimizerShard {
  Tensor master;
  Tensor grad;
  int64_t begin = 0;              // the unit element master[0] stands for (0 or shard_begin)
  std::vector<Segment> segments;  // the parameters' parts of [begin, begin + master.numel())
  // Offload: what must be brought in (dist::Resident) before the master is read or written.
  std::vector<OffloadedBuffer*> offloaded;
};

class ParamUnit {
 public:
  // Lays the slots out (their offsets are set here) padded to a multiple of the world size.
  // No bytes until allocate().
  ParamUnit(std::string name, int index, std::vector<ParamSlot> slots, const UnitContext& ctx);
  ~ParamUnit();  // waits for the host tier's copies in flight: their buffers go with the unit
  ParamUnit(const ParamUnit&) = delete;
  ParamUnit& operator=(const ParamUnit&) = delete;

  // Allocates what the stage keeps, initializes this rank's bytes (bit-identical to the same
  // slice of a single-process init) and points every parameter at its place. Once.
  void allocate();

  // ---- layout ----
  const std::string& name() const { return name_; }  // "h.3", or "<root>"
  int index() const { return index_; }
  const std::vector<ParamSlot>& slots() const { return slots_; }
  // A parameter whose gradient is not a view of this unit's buffer (its hooks did not run), or null.
  const ParamSlot* slot_with_stray_gradient() const;
  int64_t numel() const { return numel_; }            // unpadded elements
  int64_t padded() const { return padded_; }          // a multiple of N
  int64_t shard_size() const { return shard_size_; }  // padded / N (hybrid sharding: padded / K)
  int64_t shard_begin() const { return shard_begin_; }
  // The parameters' parts of unit elements [begin, end), in layout order.
  std::vector<Segment> segments(int64_t begin, int64_t end) const;
  // Block r (rank r's shard under stages 1-3; hybrid sharding: the shard of rank r of each
  // group): what the rank holding it saves in a checkpoint.
  std::vector<Segment> shard_segments(int r) const { return segments(r * shard_size_, (r + 1) * shard_size_); }

  // ---- training state: the hooks' entry points ----
  TrainingState training_state() const { return training_; }
  // Forward pre-hook: ZeRO-3 gathers the parameters (waits for a prefetch in flight).
  void begin_forward();
  // Forward post-hook: ZeRO-3 frees them.
  void end_forward();
  // Backward pre-hook: the gradient buffer is made ready, and ZeRO-3 gathers the parameters.
  void begin_backward();
  // Post-backward hook: ZeRO-3 frees the parameters (the reduction reads gradients only).
  void end_backward();

  // ---- parameters ----
  ParamState param_state() const { return param_state_; }
  // Sharded -> Unsharding: materializes the full buffer and issues the all-gather, recorded
  // under `phase` (a no-op in any other state: a prefetch of a gathered unit).
  void unshard(CommPhase phase);
  // Unsharding -> Unsharded: waits for the all-gather (a no-op in any other state).
  void wait_unshard();
  // -> Sharded: frees the full parameters (waits for a pending all-gather first). ZeRO-3 only.
  void reshard();
  // A GatheredParameters scope holds the gathered parameters: a forward or backward inside it
  // leaves them gathered (its end reshards them).
  void hold(bool on) { held_ += on ? 1 : -1; }
  bool held() const { return held_ > 0; }
  // The masters changed (an optimizer step, a checkpoint load): the compute-dtype parameters
  // are cast from them, and under stages 1-2 all-gathered. Collective under stages 1-2.
  void refresh_params();
  // Inside GatheredParameters(modify): what was written to the full parameters becomes this
  // rank's master and shard.
  void write_back_full();
  // The full parameters, or an undefined tensor while they are released.
  Tensor full_params() const;
  // Offload: queues the read of the parameter shard ahead of its gather (a no-op without
  // parameter offload or when it is gathered).
  void prefetch_shard();
  // Offload: finishes this unit's writes in flight and frees their bytes.
  void settle_offload();
  // Optimizer offload to cpu on a GPU: waits until the reduced gradients reached the host (the
  // optimizer step reads them there; copied now if none came down since the last upload). A
  // no-op otherwise.
  void wait_host_grads();
  // hpZ: whether this unit holds its secondary partition (between its forward and backward).
  bool has_secondary() const { return secondary_.defined(); }

  // ---- gradients ----
  GradState grad_state() const { return grad_state_; }
  // Whether a micro-batch's backward reduces now: native reduction sums micro-batches locally
  // where full gradients are kept anyway (stages 0-1; stage 2 with no_sync); the last reduces.
  bool reduces_now(bool last) const { return last || !local_accumulation_; }
  // Accumulating -> Reducing: issues the reduction of this micro-batch's gradients.
  void start_reduce(bool last);
  // Reducing -> Reduced (last micro-batch) or Accumulating: waits (hybrid sharding: then
  // all-reduces the shard over the replicas), scales by 1/N, stores the
  // result (exact reduction: into the pairwise partial sums) and frees what the stage frees.
  void finish_reduce();
  // -> Empty: zeroes the reduced gradients, drops a step abandoned mid-accumulation.
  void zero_grad();
  // This rank's reduced gradients (stage 0: all of them), contiguous; padding is zero.
  const Tensor& grad_shard() const { return grad_shard_; }
  // Stages 2-3 free the full gradients once reduced.
  bool full_grads_released() const { return grad_full_->is_released(); }

  // ---- the optimizer's view ----
  OptimizerShard optimizer_shard() const;

 private:
  void init_range(int64_t begin, const Tensor& dst) const;
  void allocate_params();
  void allocate_grads();
  void place_offloaded();
  Storage flat_storage(bool released, MemoryCategory category, const std::string& label, const char* release_hint) const;
  void accumulate_exact(const Tensor& reduced, bool last);
  void store_reduced(const Tensor& v);
  bool exact() const { return ctx_.reduction == GradReduction::Exact; }
  Tensor own_block_of_full() const;  // this rank's block of the full parameters (stages 1-2)
  // The compute-dtype parameters `dst` (contiguous, the master's size) cast from the master: on
  // the master's device, or with the host tier on the host and copied up beside the compute stream.
  void params_from_master(const Tensor& dst);
  // Host tier: waits for the exchange buffer's copies in flight, both ways.
  void wait_exchange_copies();
  void keep_secondary();
  void drop_secondary();
  std::shared_ptr<Work> quantized_gather();
  void dequantize_gathered();
  void drop_quantized_buffers();

  // Layout.
  std::string name_;
  int index_ = 0;
  std::vector<ParamSlot> slots_;
  int64_t numel_ = 0, padded_ = 0, shard_size_ = 0, shard_begin_ = 0;
  const UnitContext& ctx_;
  bool local_accumulation_ = false;  // native reduction: micro-batches summed locally

  // Buffers (see the table above).
  Storage full_;
  Tensor full_flat_;
  Tensor param_shard_;
  Tensor master_;
  int64_t master_begin_ = 0;
  bool separate_master_ = false;  // master has its own buffer (mixed precision): cast after updates
  std::unique_ptr<OffloadedBuffer> shard_off_;   // param_shard_ on NVMe
  std::unique_ptr<OffloadedBuffer> master_off_;  // a separate master_ on NVMe
  Tensor exchange_;                                  // the host tier's buffer ([Note: host tier])
  bool exchange_holds_grads_ = false;                // the gradients came down after the last upload
  CopyTicket grads_down_, params_up_;                // its copies in flight
  Tensor secondary_;  // hpZ: this node rank's block of the gathered parameters, forward to backward
  Tensor quant_send_, quant_recv_;  // qwZ: this rank's record and the K gathered, while in flight
  Storage grad_full_;
  Tensor grad_flat_;
  Tensor grad_shard_;
  // Exact reduction, gradient accumulation: this step's reduced micro-batch gradients summed
  // pairwise so far (a binary counter: entry i sums 2^level micro-batches; levels decrease).
  struct PartialSum {
    int level;
    Tensor sum;
  };
  std::vector<PartialSum> grad_partials_;
  // Stages 0-1, a backward after the step's reduction was done (two losses, each backward with
  // sync on): the reduced gradient so far, added to the next reduction's ([Note: a second
  // reduction in one step] in param_unit.cpp).
  Tensor reduced_before_;

  // States and the collectives in flight.
  ParamState param_state_ = ParamState::Unsharded;
  GradState grad_state_ = GradState::Empty;
  TrainingState training_ = TrainingState::Idle;
  int held_ = 0;  // open GatheredParameters scopes holding the gathered parameters
  std::shared_ptr<Work> pending_gather_;
  struct PendingReduce {
    std::shared_ptr<Work> work;
    Tensor reduced;    // stages 1-3: receives this rank's block
    bool last = true;  // the step's last micro-batch (exact reduction completes the sum)
  };
  std::unique_ptr<PendingReduce> pending_reduce_;
};

}  // namespace zdl::dist

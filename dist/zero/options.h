// Options of the ZeRO partition manager: the stage is one field (one switch, not four implementations).
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "core/device.h"
#include "core/dtype.h"

namespace zdl::nn {
class Module;
}

namespace zdl::dist {

// How gradients are summed over micro-batches and ranks.
//   Exact: every micro-batch's gradients are reduced when its backward is done, over ranks in
//     a fixed pairwise tree (Communicator::reduce_scatter_fixed_async), and the micro-steps'
//     results are summed pairwise in micro-batch order. With the micro-batch schedule of
//     ZeroPartitioner::micro_batch_index, a step's gradient is then one fixed balanced tree over
//     its micro-batches whatever the world size (a power of two) and stage, so training is
//     bit-identical across both (docs/exactness.md).
//   Native: the communication library's own reductions; stages 0-1 reduce once per step and
//     micro-batches accumulate in the gradient buffer (less traffic with gradient
//     accumulation; results differ with N in the last bits).
enum class GradReduction { Exact, Native };

// 0 = DDP (everything replicated), 1 = optimizer states sharded, 2 = + gradients,
// 3 = + parameters (gathered around each unit's forward and backward, freed afterwards).
enum class ZeroStage : int { DDP = 0, One = 1, Two = 2, Three = 3 };

// Where a model state lives between its uses, beyond this rank's memory (docs/offload.md).
//   None: in memory (the device's). Cpu: host memory (optimizer states only): on a GPU the
//     masters and Adam moments live on the host and the CPU runs the update ([Note: host tier] in
//     dist/zero/param_unit.cpp); on CPU ranks every state already lives there, so it is None.
//   Nvme: the rank's scratch file under OffloadOptions::dir, fetched one unit ahead of use.
enum class OffloadTarget { None, Cpu, Nvme };

struct OffloadOptions {
  // Adam's moments and the f32 masters of a mixed-precision run (the f32 master of an f32 run is
  // the parameter itself: under stages 0-2 it stays in memory; under ZeRO-3 `params` moves it).
  OffloadTarget optimizer = OffloadTarget::None;
  // ZeRO-3's parameter shards (the all-gathers' sources): None or Nvme. Stage 3 only.
  OffloadTarget params = OffloadTarget::None;
  // A directory on a fast local disk for the scratch files (one per rank, removed at exit).
  std::string dir;
  // Bypass the page cache (O_DIRECT) where the filesystem allows: the offloaded bytes then take no
  // host memory as cache, and the step pays the disk's own bandwidth. false: through the page cache
  // (faster where host memory can hold the states anyway).
  bool direct_io = true;
  // Optimizer offload's window (dist/offload/optimizer_window.h): up to this many bytes of
  // optimizer states held in memory outside the step, so their reads run under the backward and
  // their writes under the next forward instead of in the step. 0: the states move in the step only.
  int64_t window_bytes = 0;
  // Tests: optimizer offload to cpu on CPU ranks takes the GPU's host-tier path (separate host
  // masters, the exchange buffer, the copies), the "device" being host memory too, so its
  // bookkeeping is checked where there is no GPU. Costs memory for nothing otherwise.
  bool host_tier_on_cpu_ranks = false;
  bool any_nvme() const { return optimizer == OffloadTarget::Nvme || params == OffloadTarget::Nvme; }
};

const char* offload_target_name(OffloadTarget t);            // "none", "cpu", "nvme"
OffloadTarget offload_target_from_name(const std::string& s);  // throws for anything else

// What a stage shards, decided once from the stage (ZeroPartitioner::policy()); the partition
// manager reads these flags, never the stage number.
struct StagePolicy {
  bool shard_optimizer = false;    // masters and Adam moments: this rank's block only (stages 1-3)
  bool shard_gradients = false;    // reduced gradients in a shard of their own; full gradients freed
                                   // after their reduction (stages 2-3)
  bool shard_parameters = false;   // parameters kept as a shard; a unit is gathered for its forward
                                   // and backward and freed after (stage 3)
  bool gather_after_step = false;  // the optimizer updated a block of replicated parameters: all-gather
                                   // them after the step (stages 1-2)
  // Offload (docs/offload.md): where the states live between uses; the arithmetic never changes.
  bool optimizer_on_nvme = false;  // moments and separate masters in the scratch file
  bool params_on_nvme = false;     // parameter shards in the scratch file (stage 3)
  bool optimizer_on_host = false;  // masters and moments in host memory, updated by the CPU (a GPU run)
  static StagePolicy of(ZeroStage s);
  static StagePolicy of(ZeroStage s, const OffloadOptions& o, Device device);
};

struct ZeroOptions {
  ZeroStage stage = ZeroStage::Three;
  // Dtype of full parameters, gradients and collectives (f32, bf16; f64 for checks). The
  // master weights and Adam moments stay f32 (f64 for f64 runs) whatever this is.
  DType compute_dtype = DType::F32;
  // Where the units' flat buffers live (parameters, gradients, masters, moments, communication
  // buffers): the CPU, or this rank's GPU, which must be the communicator's device
  // (comm->device()). On CUDA the compute dtype is f32 or bf16; the masters and moments are f32.
  Device device = Device::cpu();
  // ZeRO-3: how many units ahead (forward) or behind (backward) to all-gather asynchronously.
  int prefetch = 1;
  GradReduction reduction = GradReduction::Exact;
  // Native reduction, stage 2: keep full gradients across micro-batches and reduce once on the
  // last one (like FSDP's no_sync). Native stages 0 and 1 always reduce once per step; stage 3
  // every micro-batch. Exact reduction refuses it (a local running sum has no fixed tree).
  bool no_sync = false;
  // Before each collective, check with one tiny all-gather that every rank is at the same
  // unit and event; on a mismatch every rank throws an error naming the first differing unit.
  bool check_divergence = true;
  // Hybrid sharding (FSDP's HSDP): shard the model states within groups of this many
  // consecutive ranks and replicate them across the N / shard_group groups; the reduced gradient
  // shards are all-reduced across the groups. With the group a node's ranks, the gathers and
  // reduce-scatters stay on the node's fast link and only 2 (G-1)/G s Psi / K per step crosses
  // nodes (docs/multinode.md). 0: all N ranks (plain ZeRO). Must divide N; stages 1-3.
  // Bit-identical to the flat run (ZeroPartitioner::micro_batch_index).
  int shard_group = 0;
  // ZeRO++'s hpZ (ZeRO-3): after a unit's forward gather, keep its parameters cut over the
  // ranks of this node (s Psi_u / R per rank, R ranks per node) until the unit's backward, whose
  // gather then stays within the node: the backward's gathers leave the inter-node traffic
  // (3 s Psi -> 2 s Psi per step), for s Psi / R more memory at the end of the forward. The same
  // bits. Needs shard groups that span nodes (docs/multinode.md).
  bool secondary_partition = false;
  // ZeRO++'s qwZ (ZeRO-3, CPU ranks): the forward's and backward's gathers move each shard as
  // int8 codes with a float scale per block of 256 (kernels/cpu/quantize.h): about 1/4 of the f32
  // bytes (1/2 of bf16's). The forward and backward then compute with weights within
  // max|block| / 254 of the masters, so results differ from the exact run by design (bounded in
  // docs/multinode.md); the masters, the optimizer and checkpoints stay exact. Off by default.
  bool quantize_weights = false;
  // ZeRO++'s qgZ (stages 1-3, CPU ranks, a shard group spanning nodes): the gradient
  // reduce-scatter moves int8 codes in two hops, within the node, then across nodes with the
  // node's partial sums (dist/zero/quantized_reduce.h): the inter-node bytes fall from
  // s Psi (N-1)/N to about Psi / R. Differs from the exact run by design; off by default.
  bool quantize_grads = false;
  // Optimizer states and parameter shards beyond memory (ZeRO-Offload / ZeRO-Infinity):
  // bit-identical to the same run without it.
  OffloadOptions offload;
  // Which modules become units (default: type name "Block"); everything else goes to the root unit.
  std::function<bool(const nn::Module&)> is_unit;
};

const char* stage_name(ZeroStage s);   // "ddp", "zero1", ... (flags, file names, CSVs)
const char* stage_title(ZeroStage s);  // "DDP", "ZeRO-1", ... (tables and messages)
ZeroStage stage_from_int(int s);       // throws for anything but 0..3

}  // namespace zdl::dist

// The ZeRO paper's closed forms, evaluated for this implementation: model-state bytes per rank
// (after a step and at the step's peak), bytes on the wire per step, by stage, and the
// activations a block keeps. The walkthrough prints them next to what the ledgers measured; the
// tests assert the ledgers equal them. One definition for both.
//
// P is the padded parameter count (each unit padded to a multiple of N; the padding, < N per
// unit, is the only difference from the paper's Psi). s = bytes per compute element (4 f32,
// 2 bf16); k = optimizer bytes per element (Adam's m and v: 8; with bf16 compute also the f32
// master: 12, the paper's K).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/memory.h"
#include "dist/comm/comm_ledger.h"
#include "dist/zero/options.h"
#include "nn/gpt.h"

namespace zdl::dist {

// The model states: parameters and gradients (s bytes per element each) and
// optimizer states (k bytes per element).
enum class ModelState { Parameters, Gradients, OptimizerStates };
inline constexpr ModelState kModelStates[] = {ModelState::Parameters, ModelState::Gradients,
                                              ModelState::OptimizerStates};

struct ElementBytes {
  int64_t s, k;
  static ElementBytes of(DType compute) { return compute == DType::BF16 ? ElementBytes{2, 12} : ElementBytes{4, 8}; }
  int64_t of_state(ModelState m) const { return m == ModelState::OptimizerStates ? k : s; }
};

// Whether `stage` keeps only this rank's 1/N of a state: optimizer states from ZeRO-1,
// gradients from ZeRO-2, parameters under ZeRO-3 (dist::StagePolicy).
bool is_sharded(ZeroStage stage, ModelState m);

// Bytes of one model state on one rank after a step, for n elements:
//   DDP: params sn, grads sn, optimizer kn        ZeRO-1: optimizer kn/N
//   ZeRO-2: + gradients sn/N (a shard)            ZeRO-3: + parameters sn/N (a shard)
// At the padded count P (a multiple of N), in integers, this is what the ledger must measure; at
// the unpadded Psi, in double, it is the value without padding (a fraction where N does not divide).
template <class T>
T model_state_bytes(ZeroStage stage, ModelState m, T n, int64_t N, ElementBytes e) {
  return static_cast<T>(e.of_state(m)) * n / static_cast<T>(is_sharded(stage, m) ? N : 1);
}

// The three states together (parameters, gradients, optimizer states, summed in that order).
template <class T>
T model_states_bytes(ZeroStage stage, T n, int64_t N, ElementBytes e) {
  T sum = 0;
  for (ModelState m : kModelStates) sum += model_state_bytes(stage, m, n, N, e);
  return sum;
}

// The formulas as the tables print them: "4Psi/N" for one state, "4Psi+(4+8)Psi/N" for all three.
std::string model_state_formula(ZeroStage stage, ModelState m, ElementBytes e);
std::string model_states_formula(ZeroStage stage, ElementBytes e);

// How many times less model-state memory per rank `stage` needs than DDP: ZeRO-1 (2s+k)/(2s+k/N),
// ZeRO-2 (2s+k)/(s+(s+k)/N), ZeRO-3 N.
double memory_reduction(ZeroStage stage, int64_t N, ElementBytes e);

// Model-state bytes per rank after a step, per memory-ledger category (a sharded state under its
// shard category); categories not listed hold 0 bytes.
std::map<MemoryCategory, int64_t> state_bytes_closed_form(ZeroStage stage, int64_t P, int64_t N, ElementBytes e);

// Offload (docs/offload.md): the part of state_bytes_closed_form that lives in the rank's NVMe
// store instead of memory, per category: optimizer offload moves the optimizer states (k P/N;
// DDP k P: the moments, and a mixed-precision run's f32 masters; an f32 run's master is the
// parameter itself), parameter offload (ZeRO-3) the parameter shards (s P/N). What stays in
// memory is the difference; a step brings at most three units' states back at once.
std::map<MemoryCategory, int64_t> offloaded_bytes_closed_form(ZeroStage stage, const OffloadOptions& o, int64_t P,
                                                              int64_t N, ElementBytes e);

// Optimizer offload to cpu on a GPU (the host tier, [Note: host tier] in param_unit.cpp): the
// bytes in host memory per category: the masters and Adam's moments, 12 bytes per element the
// rank updates whatever s (an f32 run's master becomes a host copy of its own), and the exchange
// buffer, s per such element (GradientShard). The device then keeps state_bytes_closed_form less
// its OptimizerState. Empty where the policy has no host tier (another target; cpu on CPU ranks).
// N: the ranks a unit is sharded over (under hybrid sharding, the group's).
std::map<MemoryCategory, int64_t> host_tier_bytes_closed_form(ZeroStage stage, const OffloadOptions& o, Device device,
                                                              int64_t P, int64_t N, ElementBytes e);

// Offload: the bytes a rank reads from and writes to its NVMe store in one training step of
// `micro_steps` micro-steps (docs/offload.md). Optimizer offload: each unit's optimizer states
// are read and written once (k P/N each way; DDP k P). Parameter offload (ZeRO-3): every gather
// reads the unit's shard (forward and backward of each micro-step: 2 A s P/N); the step then
// writes the shards once (s P/N), after reading them in f32, where the shard is the master the
// optimizer updates (bf16 casts the shard whole from its master: no read).
struct OffloadTraffic {
  int64_t read = 0, written = 0;
};
OffloadTraffic offload_traffic_closed_form(ZeroStage stage, const OffloadOptions& o, int64_t P, int64_t N,
                                           ElementBytes e, int64_t micro_steps);

// A model's units as the partitioner padded them (elements, each a multiple of N), in forward
// order: what the peaks of a step depend on.
struct PaddedUnits {
  int64_t root = 0;             // the root unit: embeddings, final norm
  std::vector<int64_t> blocks;  // the blocks'
  int64_t total() const;        // P
  int64_t largest() const;
};

// The units the partitioner makes of an nn::GPT by default (a unit per Block; the root holds
// wte, wpe and ln_f), each padded to a multiple of N: a model's sizes without building it, for
// predictions at any size and N (examples/zero_predict.cpp).
PaddedUnits gpt_padded_units(const nn::GPTConfig& cfg, int64_t N);

// The highest bytes of each model-state category and of the communication buffers during a step
// under this implementation's schedule (not the paper's: it counts states after a step). ZeRO-3
// holds the root unit gathered for all of forward and of backward, plus the unit at work and the
// `prefetch` units gathered ahead of it; ZeRO-2/3 hold the root's full gradients for the whole
// backward plus two adjacent blocks' (the one computing and the one whose reduce-scatter is in
// flight, docs/zero.md); the reduce-scatter output is one unit's shard. Activations have no
// closed form here: they are measured only.
struct StepPeaks {
  int64_t parameters, gradients, optimizer_states, comm;
};
StepPeaks step_peaks_closed_form(ZeroStage stage, const PaddedUnits& units, int64_t N, int prefetch, ElementBytes e);

// s P (N-1)/N: what one rank sends on a ring to all-gather or reduce-scatter the whole model once.
int64_t model_volume_wire_bytes(int64_t P, int64_t N, ElementBytes e);

// The communication volume of a step, in model volumes (Psi): 2 for DDP's all-reduce and
// ZeRO-1/2's reduce-scatter + all-gather, 3 for ZeRO-3 (the parameters gathered again in backward).
int64_t model_volumes_per_step(ZeroStage stage);

// One collective of a step, per (kind, phase): `calls` (one per unit), payload and wire bytes,
// and how many of those cross nodes ([Note: inter-node bytes] in dist/comm/comm_ledger.h).
struct ExpectedTraffic {
  CollectiveKind kind;
  CommPhase phase;
  int64_t calls, payload, wire, inter_node;
  std::string formula;  // of the wire bytes
};

// Where the ranks are (docs/multinode.md): N ranks on nodes of R consecutive ranks, the model
// states sharded within groups of K consecutive ranks and replicated across the G = N / K groups
// (hybrid sharding; K = N is plain ZeRO). Whether a group crosses nodes is said for rank 0's: all
// ranks alike when K and R divide one another.
struct RankLayout {
  int64_t N = 1;
  int64_t shard_group = 0;     // K; 0: N
  int64_t ranks_per_node = 0;  // R; 0: N (one node)
  bool secondary_partition = false;  // hpZ: ZeRO-3's backward gathers within a node
  bool quantize_weights = false;     // qwZ: ZeRO-3's gathers in int8 codes and block scales
  bool quantize_grads = false;       // qgZ: the reduce-scatter as two int8 all-to-alls
  int64_t K() const { return shard_group == 0 ? N : shard_group; }
  int64_t G() const { return N / K(); }
  int64_t R() const { return ranks_per_node == 0 ? N : ranks_per_node; }
  bool group_spans_nodes() const;    // K > R
  bool replicas_span_nodes() const;  // G > 1 on more than one node
};

// A step without gradient accumulation: DDP all-reduces sP (wire 2 sP (N-1)/N); ZeRO-1/2
// reduce-scatter sP and all-gather sP after the step (2 Psi); ZeRO-3 all-gathers sP in forward
// and again in backward and reduce-scatters sP (3 Psi); wire = payload (N-1)/N. Stages 1-3 on
// N > 1 ranks add the all-reduce of the gradient norm's exact square (phase Other). With
// gradient accumulation (micro_steps A > 1, the exact reduction) every micro-step repeats the
// gathers and the reduction: their calls and bytes are A times these; the post-step gathers
// and the norm's stay once a step.
std::vector<ExpectedTraffic> traffic_closed_form(ZeroStage stage, int64_t P, int64_t units, int64_t N, ElementBytes e,
                                                 int64_t micro_steps = 1);
// The same on a layout: the gathers and reduce-scatters run within the group of K (wire
// s P (K-1)/K), and hybrid sharding adds the reduced shard's all-reduce over the G replicas
// (payload s P/K, wire 2 s P/K (G-1)/G). Inter-node: a group's collectives when the group spans
// nodes (flat ZeRO on several nodes: all of them, 3 s Psi (N-1)/N for ZeRO-3), the replicas'
// all-reduce when they do (hybrid sharding with K = R: only it, 2 s Psi/K (G-1)/G). With the
// secondary partition (hpZ) ZeRO-3's backward gathers run over the group's R ranks on a node:
// wire s Psi (R-1)/R, none of it inter-node.
// qwZ: the units' padded sizes decide the bytes (a record of W = ceil(S/4) + ceil(S/256) int32
// words per rank and unit, S = padded / K); the gathers' payload is then 4 K W per unit. qgZ:
// the reduce-scatter becomes two all-to-alls per unit (dist/zero/quantized_reduce.h), payload
// 4 W (K + M), wire 4 W (K (R-1)/R + M-1), of which 4 W (M-1) across nodes (M = K / R nodes).
std::vector<ExpectedTraffic> traffic_closed_form(ZeroStage stage, const std::vector<int64_t>& padded_units,
                                                 const RankLayout& layout, ElementBytes e, int64_t micro_steps = 1);
// qwZ: one training gather's payload of a unit of `padded_unit` elements sharded over K ranks.
int64_t quantized_gather_payload(int64_t padded_unit, int64_t K);

// Activation bytes a GPT block keeps from its forward for its backward (f32 on the CPU), for a
// batch of `batch` sequences of `seq` tokens: the forward of L blocks keeps L times this. Counted from
// the ops: ln_1's output C, q k v in head-major copies 3C, the attention output C with its
// log-sum-exp NH, the output back in [T, C] layout C, the residual sum C, ln_2's output C, c_fc's
// output 4C and GELU's 4C, the block's output C, and two LayerNorms' mean and 1/std 4:
//   per token (17 C + NH + 4) s,
// or (16 C + NH + 4) s with one token (T = 1) or one head, where the [T, C] layout is a view.
// A block under activation checkpointing keeps its input alone, C s per token; its activations
// exist again only while its backward recomputes it, one block at a time.
struct BlockActivations {
  int64_t kept;          // bytes a block keeps from forward to backward
  int64_t checkpointed;  // the same block under activation checkpointing (its input)
};
BlockActivations block_activation_bytes(int64_t batch, int64_t seq, int64_t n_embd, int64_t n_head, int64_t s);

// What checkpointing every one of n_layer blocks saves of the activations the forward keeps:
// n_layer (kept - checkpointed), per rank for its `batch` rows.
int64_t checkpointing_saved_bytes(int64_t n_layer, int64_t batch, int64_t seq, int64_t n_embd, int64_t n_head, int64_t s);
inline constexpr const char* kCheckpointingSavedFormula = "L (16 C + NH + 4) (B/N) T s (15 C: T = 1 or NH = 1)";

}  // namespace zdl::dist

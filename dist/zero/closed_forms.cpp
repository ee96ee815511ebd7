#include "dist/zero/closed_forms.h"

#include <algorithm>

#include "core/check.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu/square_sum.h"

namespace zdl::dist {

bool is_sharded(ZeroStage stage, ModelState m) {
  const StagePolicy pol = StagePolicy::of(stage);
  switch (m) {
    case ModelState::Parameters: return pol.shard_parameters;
    case ModelState::Gradients: return pol.shard_gradients;
    case ModelState::OptimizerStates: return pol.shard_optimizer;
  }
  return false;
}

std::string model_state_formula(ZeroStage stage, ModelState m, ElementBytes e) {
  return detail::str(e.of_state(m), "Psi", is_sharded(stage, m) ? "/N" : "");
}

std::string model_states_formula(ZeroStage stage, ElementBytes e) {
  switch (stage) {
    case ZeroStage::DDP: return detail::str("(", e.s, "+", e.s, "+", e.k, ")Psi");
    case ZeroStage::One: return detail::str(e.s, "Psi+", e.s, "Psi+", e.k, "Psi/N");
    case ZeroStage::Two: return detail::str(e.s, "Psi+(", e.s, "+", e.k, ")Psi/N");
    case ZeroStage::Three: return detail::str("(", e.s, "+", e.s, "+", e.k, ")Psi/N");
  }
  return "?";
}

double memory_reduction(ZeroStage stage, int64_t N, ElementBytes e) {
  // Per element: the states kept whole, plus the sharded ones over N.
  auto per_element = [&](ZeroStage st) {
    int64_t whole = 0, sharded = 0;
    for (ModelState m : kModelStates) (is_sharded(st, m) ? sharded : whole) += e.of_state(m);
    return static_cast<double>(whole) + static_cast<double>(sharded) / static_cast<double>(N);
  };
  return per_element(ZeroStage::DDP) / per_element(stage);
}

std::map<MemoryCategory, int64_t> state_bytes_closed_form(ZeroStage stage, int64_t P, int64_t N, ElementBytes e) {
  auto bytes = [&](ModelState m) { return model_state_bytes(stage, m, P, N, e); };
  std::map<MemoryCategory, int64_t> out;
  const bool params = is_sharded(stage, ModelState::Parameters), grads = is_sharded(stage, ModelState::Gradients);
  out[params ? MemoryCategory::ParameterShard : MemoryCategory::Parameter] = bytes(ModelState::Parameters);
  out[grads ? MemoryCategory::GradientShard : MemoryCategory::Gradient] = bytes(ModelState::Gradients);
  out[MemoryCategory::OptimizerState] = bytes(ModelState::OptimizerStates);
  return out;
}

std::map<MemoryCategory, int64_t> offloaded_bytes_closed_form(ZeroStage stage, const OffloadOptions& o, int64_t P,
                                                              int64_t N, ElementBytes e) {
  std::map<MemoryCategory, int64_t> out;
  if (o.optimizer == OffloadTarget::Nvme)
    out[MemoryCategory::OptimizerState] = model_state_bytes(stage, ModelState::OptimizerStates, P, N, e);
  if (o.params == OffloadTarget::Nvme && is_sharded(stage, ModelState::Parameters))
    out[MemoryCategory::ParameterShard] = model_state_bytes(stage, ModelState::Parameters, P, N, e);
  return out;
}

std::map<MemoryCategory, int64_t> host_tier_bytes_closed_form(ZeroStage stage, const OffloadOptions& o, Device device,
                                                              int64_t P, int64_t N, ElementBytes e) {
  if (!StagePolicy::of(stage, o, device).optimizer_on_host) return {};
  const int64_t updated = is_sharded(stage, ModelState::OptimizerStates) ? P / N : P;  // master elements
  return {{MemoryCategory::OptimizerState, 12 * updated}, {MemoryCategory::GradientShard, e.s * updated}};
}

OffloadTraffic offload_traffic_closed_form(ZeroStage stage, const OffloadOptions& o, int64_t P, int64_t N,
                                           ElementBytes e, int64_t micro_steps) {
  OffloadTraffic t;
  if (o.optimizer == OffloadTarget::Nvme) {
    const int64_t opt = model_state_bytes(stage, ModelState::OptimizerStates, P, N, e);
    t.read += opt;
    t.written += opt;
  }
  if (o.params == OffloadTarget::Nvme && is_sharded(stage, ModelState::Parameters)) {
    const int64_t shard = model_state_bytes(stage, ModelState::Parameters, P, N, e);
    t.read += 2 * micro_steps * shard + (e.s == 4 ? shard : 0);  // f32: the shard is the master
    t.written += shard;
  }
  return t;
}

int64_t PaddedUnits::total() const {
  int64_t sum = root;
  for (int64_t b : blocks) sum += b;
  return sum;
}

int64_t PaddedUnits::largest() const {
  return std::max(root, blocks.empty() ? int64_t{0} : *std::max_element(blocks.begin(), blocks.end()));
}

PaddedUnits gpt_padded_units(const nn::GPTConfig& cfg, int64_t N) {
  const int64_t C = cfg.n_embd, norms = cfg.bias ? 2 * C : C;  // a LayerNorm's weight (and bias)
  // 12 C^2 weights (qkv 3, proj 1, fc 4, fc-proj 4), their biases 9C, two LayerNorms.
  const int64_t block = 12 * C * C + (cfg.bias ? 9 * C : 0) + 2 * norms;
  const int64_t root = cfg.padded_vocab() * C + cfg.block_size * C + norms;
  auto pad = [N](int64_t n) { return (n + N - 1) / N * N; };
  return {.root = pad(root), .blocks = std::vector<int64_t>(static_cast<size_t>(cfg.n_layer), pad(block))};
}

StepPeaks step_peaks_closed_form(ZeroStage stage, const PaddedUnits& units, int64_t N, int prefetch, ElementBytes e) {
  // The largest sum of `count` adjacent blocks: the units gathered (or holding full gradients) at once.
  auto window = [&](size_t count) {
    const size_t k = std::min(units.blocks.size(), count);
    int64_t best = 0;
    for (size_t i = 0; i + k <= units.blocks.size(); ++i) {
      int64_t sum = 0;
      for (size_t j = i; j < i + k; ++j) sum += units.blocks[j];
      best = std::max(best, sum);
    }
    return best;
  };
  const int64_t P = units.total();
  auto after_step = [&](ModelState m) { return model_state_bytes(stage, m, P, N, e); };
  // A sharded state's full units exist only while in use: the root's and a window of blocks'.
  auto in_use = [&](ModelState m, size_t blocks) {
    return is_sharded(stage, m) ? e.s * (units.root + window(blocks)) : int64_t{0};
  };
  return {.parameters = after_step(ModelState::Parameters) + in_use(ModelState::Parameters, static_cast<size_t>(prefetch) + 1),
          .gradients = after_step(ModelState::Gradients) + in_use(ModelState::Gradients, 2),
          .optimizer_states = after_step(ModelState::OptimizerStates),
          .comm = is_sharded(stage, ModelState::OptimizerStates) ? e.s * units.largest() / N : 0};
}

int64_t model_volume_wire_bytes(int64_t P, int64_t N, ElementBytes e) { return e.s * P * (N - 1) / N; }

int64_t model_volumes_per_step(ZeroStage stage) { return StagePolicy::of(stage).shard_parameters ? 3 : 2; }

bool RankLayout::group_spans_nodes() const { return K() > R(); }
bool RankLayout::replicas_span_nodes() const { return G() > 1 && N > R(); }

namespace {
// ZeRO++'s quantized collectives, over all units: qwZ's payload of one training gather (0: the
// gathers move s bytes an element), and qgZ's two all-to-alls (0: a plain reduce-scatter).
struct Quantized {
  int64_t gather_payload = 0;
  int64_t a2a_payload = 0, a2a_wire = 0, a2a_inter = 0;
};

std::vector<ExpectedTraffic> traffic(ZeroStage stage, int64_t P, int64_t units, const RankLayout& L, ElementBytes e,
                                     const Quantized& q = {}) {
  const int64_t N = L.N, K = L.K(), G = L.G();
  const bool hybrid = K < N;
  const int64_t pay = e.s * P, one = model_volume_wire_bytes(P, K, e);
  const StagePolicy pol = StagePolicy::of(stage);
  std::vector<ExpectedTraffic> w;
  // A collective within the group crosses nodes when the group does ([Note: inter-node bytes]).
  auto group = [&](CollectiveKind kind, CommPhase phase, int64_t wire, const char* formula) {
    w.push_back({kind, phase, units, pay, wire, L.group_spans_nodes() ? wire : 0, formula});
  };
  // qwZ: a training gather of int8 records, within the group.
  auto quantized_gather = [&](CommPhase phase) {
    const int64_t wire = q.gather_payload * (K - 1) / K;
    w.push_back({CollectiveKind::AllGather, phase, units, q.gather_payload, wire, L.group_spans_nodes() ? wire : 0,
                 "K 4 W (K-1)/K"});
  };
  if (!pol.shard_optimizer) {
    group(CollectiveKind::AllReduce, CommPhase::GradReduce, 2 * one, "2 s Psi (N-1)/N");
  } else {
    const char* f = hybrid ? "s Psi (K-1)/K" : "s Psi (N-1)/N";
    if (pol.shard_parameters) {
      if (q.gather_payload > 0) quantized_gather(CommPhase::ForwardGather);
      else group(CollectiveKind::AllGather, CommPhase::ForwardGather, one, f);
      if (L.secondary_partition) {  // from the secondary partition, over the group's ranks on the node
        const int64_t R = std::min(K, L.R());
        w.push_back({CollectiveKind::AllGather, CommPhase::BackwardGather, units, pay, model_volume_wire_bytes(P, R, e), 0,
                     "s Psi (R-1)/R"});
      } else if (q.gather_payload > 0) {
        quantized_gather(CommPhase::BackwardGather);
      } else {
        group(CollectiveKind::AllGather, CommPhase::BackwardGather, one, f);
      }
    }
    if (q.a2a_payload > 0) {
      w.push_back({CollectiveKind::AllToAll, CommPhase::GradReduce, 2 * units, q.a2a_payload, q.a2a_wire, q.a2a_inter,
                   "4 W (K (R-1)/R + M-1)"});
    } else {
      group(CollectiveKind::ReduceScatter, CommPhase::GradReduce, one, f);
    }
    if (hybrid && G > 1) {  // the reduced shards, all-reduced over the replicas
      const int64_t shard = pay / K, wire = 2 * shard * (G - 1) / G;
      w.push_back({CollectiveKind::AllReduce, CommPhase::GradReduce, units, shard, wire,
                   L.replicas_span_nodes() ? wire : 0, "2 s Psi/K (G-1)/G"});
    }
    if (pol.gather_after_step) group(CollectiveKind::AllGather, CommPhase::PostStepGather, one, f);
    if (K > 1) {  // [Note: exact gradient norm] in dist/zero/partitioner.cpp: over the group's shards
      const int64_t norm = 8 * kernels::cpu::ExactSquareSum::kSerializedSize;
      const int64_t wire = ring_wire_bytes(CollectiveKind::AllReduce, norm, static_cast<int>(K));
      w.push_back({CollectiveKind::AllReduce, CommPhase::Other, 1, norm, wire, L.group_spans_nodes() ? wire : 0,
                   "grad-norm words"});
    }
  }
  return w;
}
}  // namespace

// A step of A micro-steps under the exact reduction: every micro-step gathers (ZeRO-3) and
// reduces again; the post-step gathers and the norm's words stay once a step.
std::vector<ExpectedTraffic> per_step(std::vector<ExpectedTraffic> w, int64_t micro_steps) {
  for (ExpectedTraffic& t : w) {
    if (t.phase == CommPhase::PostStepGather || t.phase == CommPhase::Other) continue;
    t.calls *= micro_steps;
    t.payload *= micro_steps;
    t.wire *= micro_steps;
    t.inter_node *= micro_steps;
  }
  return w;
}

std::vector<ExpectedTraffic> traffic_closed_form(ZeroStage stage, int64_t P, int64_t units, int64_t N, ElementBytes e,
                                                 int64_t micro_steps) {
  return per_step(traffic(stage, P, units, RankLayout{.N = N}, e), micro_steps);
}

int64_t quantized_gather_payload(int64_t padded_unit, int64_t K) {
  return 4 * K * kernels::cpu::quantized_record_words(padded_unit / K);
}

std::vector<ExpectedTraffic> traffic_closed_form(ZeroStage stage, const std::vector<int64_t>& padded_units,
                                                 const RankLayout& L, ElementBytes e, int64_t micro_steps) {
  const int64_t K = L.K(), R = std::min(K, L.R()), M = K / R;
  int64_t P = 0;
  Quantized q;
  for (int64_t u : padded_units) {
    P += u;
    if (L.quantize_weights) q.gather_payload += quantized_gather_payload(u, K);
    if (L.quantize_grads) {  // dist/zero/quantized_reduce.h: hop 1 within the node, hop 2 across
      const int64_t W = kernels::cpu::quantized_record_words(u / K);
      q.a2a_payload += 4 * W * (K + M);
      q.a2a_wire += 4 * W * (M * (R - 1) + (M - 1));
      q.a2a_inter += 4 * W * (M - 1);
    }
  }
  return per_step(traffic(stage, P, static_cast<int64_t>(padded_units.size()), L, e, q), micro_steps);
}

BlockActivations block_activation_bytes(int64_t batch, int64_t seq, int64_t n_embd, int64_t n_head, int64_t s) {
  const int64_t tokens = batch * seq;
  // With one token or one head, [B, NH, T, HS] -> [B, T, C] is a view: no copy to keep.
  const int64_t layout_copy = seq == 1 || n_head == 1 ? 0 : n_embd;
  return {tokens * (16 * n_embd + layout_copy + n_head + 4) * s, tokens * n_embd * s};
}

int64_t checkpointing_saved_bytes(int64_t n_layer, int64_t batch, int64_t seq, int64_t n_embd, int64_t n_head, int64_t s) {
  const BlockActivations b = block_activation_bytes(batch, seq, n_embd, n_head, s);
  return n_layer * (b.kept - b.checkpointed);
}

}  // namespace zdl::dist

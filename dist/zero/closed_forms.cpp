#include "dist/zero/closed_forms.h"

#include <algorithm>

#include "core/check.h"
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

std::vector<ExpectedTraffic> traffic_closed_form(ZeroStage stage, int64_t P, int64_t units, int64_t N, ElementBytes e) {
  const int64_t pay = e.s * P, one = model_volume_wire_bytes(P, N, e);
  const StagePolicy pol = StagePolicy::of(stage);
  std::vector<ExpectedTraffic> w;
  if (!pol.shard_optimizer) {
    w.push_back({CollectiveKind::AllReduce, CommPhase::GradReduce, units, pay, 2 * one, "2 s Psi (N-1)/N"});
  } else {
    if (pol.shard_parameters) {
      w.push_back({CollectiveKind::AllGather, CommPhase::ForwardGather, units, pay, one, "s Psi (N-1)/N"});
      w.push_back({CollectiveKind::AllGather, CommPhase::BackwardGather, units, pay, one, "s Psi (N-1)/N"});
    }
    w.push_back({CollectiveKind::ReduceScatter, CommPhase::GradReduce, units, pay, one, "s Psi (N-1)/N"});
    if (pol.gather_after_step)
      w.push_back({CollectiveKind::AllGather, CommPhase::PostStepGather, units, pay, one, "s Psi (N-1)/N"});
    if (N > 1) {  // [Note: exact gradient norm] in dist/zero/partitioner.cpp
      const int64_t norm = 8 * kernels::cpu::ExactSquareSum::kSerializedSize;
      w.push_back({CollectiveKind::AllReduce, CommPhase::Other, 1, norm, ring_wire_bytes(CollectiveKind::AllReduce, norm, static_cast<int>(N)),
                   "grad-norm words"});
    }
  }
  return w;
}

BlockActivations block_activation_bytes(int64_t batch, int64_t seq, int64_t n_embd, int64_t n_head, int64_t s) {
  const int64_t tokens = batch * seq;
  return {tokens * (17 * n_embd + n_head + 4) * s, tokens * n_embd * s};
}

int64_t checkpointing_saved_bytes(int64_t n_layer, int64_t batch, int64_t seq, int64_t n_embd, int64_t n_head, int64_t s) {
  const BlockActivations b = block_activation_bytes(batch, seq, n_embd, n_head, s);
  return n_layer * (b.kept - b.checkpointed);
}

}  // namespace zdl::dist

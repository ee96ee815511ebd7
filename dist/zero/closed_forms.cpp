#include "dist/zero/closed_forms.h"

#include "kernels/cpu/square_sum.h"

namespace zdl::dist {

std::map<MemoryCategory, int64_t> state_bytes_closed_form(ZeroStage stage, int64_t P, int64_t N, ElementBytes e) {
  const StagePolicy pol = StagePolicy::of(stage);
  std::map<MemoryCategory, int64_t> m;
  (pol.shard_parameters ? m[MemoryCategory::ParameterShard] : m[MemoryCategory::Parameter]) =
      e.s * P / (pol.shard_parameters ? N : 1);
  (pol.shard_gradients ? m[MemoryCategory::GradientShard] : m[MemoryCategory::Gradient]) =
      e.s * P / (pol.shard_gradients ? N : 1);
  m[MemoryCategory::OptimizerState] = e.k * P / (pol.shard_optimizer ? N : 1);
  return m;
}

std::vector<ExpectedTraffic> traffic_closed_form(ZeroStage stage, int64_t P, int64_t units, int64_t N, ElementBytes e) {
  const int64_t pay = e.s * P, one = pay * (N - 1) / N;
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

}  // namespace zdl::dist

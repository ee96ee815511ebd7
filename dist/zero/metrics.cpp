#include "dist/zero/metrics.h"

#include <string>

#include "core/memory.h"
#include "dist/comm/comm_ledger.h"

namespace zdl::dist {

nlohmann::json memory_snapshot(Device dev) {
  const MemoryStats s = memory_ledger().stats(dev);
  auto c = [&](MemoryCategory k) { return s.current_of(k); };
  return {{"param", c(MemoryCategory::Parameter) + c(MemoryCategory::ParameterShard)},
          {"param_full", c(MemoryCategory::Parameter)},
          {"param_shard", c(MemoryCategory::ParameterShard)},
          {"grad", c(MemoryCategory::Gradient) + c(MemoryCategory::GradientShard)},
          {"grad_full", c(MemoryCategory::Gradient)},
          {"grad_shard", c(MemoryCategory::GradientShard)},
          {"optim", c(MemoryCategory::OptimizerState)},
          {"activation", c(MemoryCategory::Activation)},
          {"comm", c(MemoryCategory::CommBuffer)},
          {"workspace", c(MemoryCategory::Workspace)},
          {"peak", s.total_peak},
          {"process_peak_rss", process_peak_rss_bytes()},
          {"device", dev.str()},
          {"host_comm", dev.is_cpu() ? int64_t{0}
                                     : memory_ledger().stats(Device::cpu()).current_of(MemoryCategory::CommBuffer)}};
}

nlohmann::json comm_snapshot() {
  nlohmann::json j = nlohmann::json::object();
  for (int k = 0; k < kNumCollectiveKinds; ++k)
    for (int p = 0; p < kNumCommPhases; ++p) {
      const auto kind = static_cast<CollectiveKind>(k);
      const auto phase = static_cast<CommPhase>(p);
      const CommStats st = comm_ledger().stats(kind, phase);
      if (st.calls == 0) continue;
      j[std::string(collective_name(kind)) + "/" + phase_name(phase)] = {
          {"calls", st.calls}, {"payload", st.payload_bytes}, {"wire", st.wire_bytes},
          {"inter_node", st.inter_node_wire_bytes}};
    }
  return j;
}

}  // namespace zdl::dist

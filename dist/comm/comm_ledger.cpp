// The process-wide CommLedger and the thread's CommPhase (see comm_ledger.h).
#include "dist/comm/comm_ledger.h"

#include "core/check.h"

namespace zdl::dist {

const char* collective_name(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::AllReduce: return "all_reduce";
    case CollectiveKind::ReduceScatter: return "reduce_scatter";
    case CollectiveKind::AllGather: return "all_gather";
    case CollectiveKind::AllToAll: return "all_to_all";
    case CollectiveKind::Broadcast: return "broadcast";
  }
  return "?";
}

const char* phase_name(CommPhase p) {
  switch (p) {
    case CommPhase::ForwardGather: return "forward_gather";
    case CommPhase::BackwardGather: return "backward_gather";
    case CommPhase::GradReduce: return "grad_reduce";
    case CommPhase::PostStepGather: return "post_step_gather";
    case CommPhase::Other: return "other";
    case CommPhase::Metrics: return "metrics";
  }
  return "?";
}

int64_t ring_wire_bytes(CollectiveKind kind, int64_t payload_bytes, int world_size, bool is_root) {
  ZDL_CHECK(world_size >= 1, "ring_wire_bytes: world size ", world_size, " < 1");
  const int64_t n = world_size;
  switch (kind) {
    case CollectiveKind::AllGather:
    case CollectiveKind::AllToAll:
    case CollectiveKind::ReduceScatter: return payload_bytes * (n - 1) / n;
    case CollectiveKind::AllReduce: return 2 * payload_bytes * (n - 1) / n;
    case CollectiveKind::Broadcast: return (is_root && n > 1) ? payload_bytes : 0;
  }
  return 0;
}

void CommLedger::record(CollectiveKind kind, CommPhase phase, int64_t payload_bytes, int64_t wire_bytes,
                        bool inter_node) {
  std::lock_guard<std::mutex> lock(mu_);
  CommStats& s = stats_[static_cast<int>(kind)][static_cast<int>(phase)];
  s.calls += 1;
  s.payload_bytes += payload_bytes;
  s.wire_bytes += wire_bytes;
  if (inter_node) s.inter_node_wire_bytes += wire_bytes;
}

CommStats CommLedger::stats(CollectiveKind kind, CommPhase phase) const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_[static_cast<int>(kind)][static_cast<int>(phase)];
}

CommStats CommLedger::total() const {
  std::lock_guard<std::mutex> lock(mu_);
  CommStats t;
  for (const auto& per_kind : stats_)
    for (const CommStats& s : per_kind) {
      t.calls += s.calls;
      t.payload_bytes += s.payload_bytes;
      t.wire_bytes += s.wire_bytes;
      t.inter_node_wire_bytes += s.inter_node_wire_bytes;
    }
  return t;
}

CommStats CommLedger::total(CollectiveKind kind) const {
  std::lock_guard<std::mutex> lock(mu_);
  CommStats t;
  for (const CommStats& s : stats_[static_cast<int>(kind)]) {
    t.calls += s.calls;
    t.payload_bytes += s.payload_bytes;
    t.wire_bytes += s.wire_bytes;
    t.inter_node_wire_bytes += s.inter_node_wire_bytes;
  }
  return t;
}

void CommLedger::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_ = {};
}

CommLedger& comm_ledger() {
  static CommLedger ledger;
  return ledger;
}

namespace {
thread_local CommPhase t_phase = CommPhase::Other;
}

CommPhase current_comm_phase() { return t_phase; }

CommPhaseScope::CommPhaseScope(CommPhase p) : prev_(t_phase) { t_phase = p; }
CommPhaseScope::~CommPhaseScope() { t_phase = prev_; }

void record_collective(CollectiveKind kind, int64_t payload_bytes, int world_size, bool is_root, bool inter_node) {
  comm_ledger().record(kind, current_comm_phase(), payload_bytes,
                       ring_wire_bytes(kind, payload_bytes, world_size, is_root), inter_node);
}

}  // namespace zdl::dist

// Counts every byte a collective moves, by kind and by phase of the training step, so a
// step's traffic can be put next to the ZeRO paper's closed forms (docs/design.md, mechanism 5).
//
// Two numbers per collective: `payload` = the bytes of the full logical buffer (what the
// paper calls Psi * element size for a whole-model collective), and `wire` = the bytes this
// rank sends on a ring implementation: all-gather, reduce-scatter and all-to-all (N-1)/N * payload,
// all-reduce 2 (N-1)/N * payload, broadcast payload on the root, 0 elsewhere (integer
// arithmetic: payload * (N-1) / N, so with N = 1 nothing goes on the wire, broadcast included).
// Payload per kind: all-gather the OUTPUT (N blocks), reduce-scatter and all-to-all the INPUT (N blocks),
// all-reduce and broadcast the tensor. Host-side metadata (all_gather_i64) is not recorded;
// all_reduce_sum is an all-reduce of 8 bytes.
//
// [Note: inter-node bytes] A collective on a communicator whose ranks sit on more than one node
// (Communicator::spans_nodes) records its wire bytes as inter-node too: on a ring every link
// carries the same bytes, the links between nodes included, so the slowest link sees all of
// them (the accounting of the ZeRO++ paper's 3 Psi -> 0.75 Psi). A collective within one node
// records none. docs/multinode.md.
//
//   { dist::CommPhaseScope p(dist::CommPhase::ForwardGather); comm.all_gather(shard, full); }
//   dist::comm_ledger().stats(CollectiveKind::AllGather, CommPhase::ForwardGather).payload_bytes
#pragma once
#include <array>
#include <cstdint>
#include <mutex>
#include <string>

namespace zdl::dist {

enum class CollectiveKind : uint8_t { AllReduce, ReduceScatter, AllGather, Broadcast, AllToAll };
constexpr int kNumCollectiveKinds = 5;
const char* collective_name(CollectiveKind k);  // "all_reduce", "reduce_scatter", ...

enum class CommPhase : uint8_t {
  ForwardGather,   // ZeRO-3 parameter all-gather before a unit's forward
  BackwardGather,  // ZeRO-3 parameter all-gather before a unit's backward
  GradReduce,      // gradient all-reduce / reduce-scatter after a unit's backward
  PostStepGather,  // ZeRO-1/2 parameter all-gather after the optimizer step
  Other,           // everything else (norms, checks, checkpoint traffic, user calls)
  Metrics,         // what a training loop shares only to report it (dist::Trainer's step loss)
};
constexpr int kNumCommPhases = 6;
const char* phase_name(CommPhase p);  // "forward_gather", ...

struct CommStats {
  int64_t calls = 0;
  int64_t payload_bytes = 0;
  int64_t wire_bytes = 0;
  int64_t inter_node_wire_bytes = 0;  // the part of wire_bytes that crosses nodes
  int64_t intra_node_wire_bytes() const { return wire_bytes - inter_node_wire_bytes; }
};

class CommLedger {
 public:
  void record(CollectiveKind kind, CommPhase phase, int64_t payload_bytes, int64_t wire_bytes, bool inter_node = false);
  CommStats stats(CollectiveKind kind, CommPhase phase) const;
  CommStats total() const;
  // All phases of one kind.
  CommStats total(CollectiveKind kind) const;
  void reset();

 private:
  mutable std::mutex mu_;
  std::array<std::array<CommStats, kNumCommPhases>, kNumCollectiveKinds> stats_{};
};

// Process-wide ledger (one per rank).
CommLedger& comm_ledger();

// This rank's wire bytes for one collective on a ring of `world_size` ranks (the rule above).
int64_t ring_wire_bytes(CollectiveKind kind, int64_t payload_bytes, int world_size, bool is_root = false);
// Records one collective under the calling thread's phase, wire bytes by ring_wire_bytes (all of
// them inter-node when the group spans nodes). Backends call it on the issuing thread (the phase
// is thread-local), through Communicator::record.
void record_collective(CollectiveKind kind, int64_t payload_bytes, int world_size, bool is_root = false,
                       bool inter_node = false);

// The phase collectives issued on this thread are recorded under (default: Other).
CommPhase current_comm_phase();
class CommPhaseScope {
 public:
  explicit CommPhaseScope(CommPhase p);
  ~CommPhaseScope();
  CommPhaseScope(const CommPhaseScope&) = delete;
  CommPhaseScope& operator=(const CommPhaseScope&) = delete;

 private:
  CommPhase prev_;
};

}  // namespace zdl::dist

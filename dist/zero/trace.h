// The events of one rank's step that the partition manager reports, for timelines and
// memory-over-time pictures (the walkthrough): ZeroPartitioner::set_trace receives them.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace zdl::dist {

enum class TraceKind : uint8_t {
  ForwardBegin, ForwardEnd,    // a unit's forward (after its gather; after its params are freed)
  BackwardBegin, BackwardEnd,  // a unit's backward (after its gather; when its grads are complete)
  GatherIssue, GatherDone,     // an all-gather of a unit's parameters issued / waited for
  GatherFinished,              // ... its bytes arrived (reported at GatherDone, timed when they did;
                               //     not on NCCL, whose collectives finish on the GPU's stream)
  SyncBegin, SyncEnd,          // the divergence check before a unit's collective: waiting for the
                               // other ranks to reach it (N > 1 with ZeroOptions::check_divergence)
  ReduceBegin, ReduceEnd,      // a unit's gradient reduction (ReduceEnd after freeing buffers)
  StepBegin, StepEnd,          // the optimizer step (StepEnd after the post-step all-gathers)
};
const char* trace_kind_name(TraceKind k);

struct TraceEvent {
  TraceKind kind;
  std::string unit;       // "" for StepBegin / StepEnd
  double t_us = 0;        // microseconds since the manager was created
  std::chrono::steady_clock::time_point at;  // the same moment on the steady clock
  int64_t mem_bytes = 0;  // this rank's memory ledger total on the unit's device at that moment
};

}  // namespace zdl::dist

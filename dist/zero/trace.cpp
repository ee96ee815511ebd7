#include "dist/zero/trace.h"

namespace zdl::dist {

const char* trace_kind_name(TraceKind k) {
  switch (k) {
    case TraceKind::ForwardBegin: return "forward_begin";
    case TraceKind::ForwardEnd: return "forward_end";
    case TraceKind::BackwardBegin: return "backward_begin";
    case TraceKind::BackwardEnd: return "backward_end";
    case TraceKind::GatherIssue: return "gather_issue";
    case TraceKind::GatherDone: return "gather_done";
    case TraceKind::GatherFinished: return "gather_finished";
    case TraceKind::SyncBegin: return "sync_begin";
    case TraceKind::SyncEnd: return "sync_end";
    case TraceKind::ReduceBegin: return "reduce_begin";
    case TraceKind::ReduceEnd: return "reduce_end";
    case TraceKind::StepBegin: return "step_begin";
    case TraceKind::StepEnd: return "step_end";
  }
  return "?";
}

}  // namespace zdl::dist

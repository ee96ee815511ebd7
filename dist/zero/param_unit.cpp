#include "dist/zero/param_unit.h"

#include <algorithm>

namespace zdl::dist {

std::vector<Segment> ParamUnit::segments(int64_t begin, int64_t end) const {
  std::vector<Segment> out;
  for (const ParamSlot& s : slots) {
    const int64_t lo = std::max(begin, s.offset), hi = std::min(end, s.offset + s.numel);
    if (lo < hi) out.push_back({&s, lo, hi});
  }
  return out;
}

const char* state_name(ParamState s) {
  switch (s) {
    case ParamState::Sharded: return "sharded";
    case ParamState::Gathering: return "gathering";
    case ParamState::Gathered: return "gathered";
  }
  return "?";
}

const char* state_name(GradState s) {
  switch (s) {
    case GradState::Empty: return "empty";
    case GradState::Accumulating: return "accumulating";
    case GradState::Reducing: return "reducing";
    case GradState::Reduced: return "reduced";
  }
  return "?";
}

void ParamUnit::unshard_async(Communicator& comm) {
  if (param_state_ != ParamState::Sharded) return;
  full->materialize(MemoryCategory::Parameter);
  pending_ = comm.all_gather_async(param_shard, full_flat);
  param_state_ = ParamState::Gathering;
}

void ParamUnit::wait_unshard() {
  if (param_state_ != ParamState::Gathering) return;
  pending_->wait();  // a watchdog error leaves the unit Gathering: its bytes may still arrive
  pending_.reset();
  param_state_ = ParamState::Gathered;
}

void ParamUnit::reshard() {
  wait_unshard();
  full->release();
  param_state_ = ParamState::Sharded;
}

}  // namespace zdl::dist

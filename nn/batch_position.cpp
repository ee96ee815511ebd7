#include "nn/batch_position.h"

#include <atomic>

#include "core/check.h"

namespace zdl::nn {

namespace {
thread_local const BatchPosition* t_current = nullptr;
std::atomic<uint64_t> g_next_id{1};
}  // namespace

BatchPosition::BatchPosition(int64_t step_, int64_t first_sequence_, uint64_t seed_)
    : step(step_), first_sequence(first_sequence_), seed(seed_), id(g_next_id.fetch_add(1)), prev_(t_current) {
  ZDL_CHECK(step >= 0 && first_sequence >= 0, "BatchPosition: step and first_sequence must be >= 0, got step=", step,
            " first_sequence=", first_sequence);
  t_current = this;
}

BatchPosition::BatchPosition(const Record& r)
    : step(r.step), first_sequence(r.first_sequence), seed(r.seed), id(r.id), prev_(t_current) {
  t_current = this;
}

BatchPosition::~BatchPosition() { t_current = prev_; }

const BatchPosition* BatchPosition::current() { return t_current; }

BatchPosition::Hide::Hide() : prev_(t_current) { t_current = nullptr; }
BatchPosition::Hide::~Hide() { t_current = prev_; }

}  // namespace zdl::nn

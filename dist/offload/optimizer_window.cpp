#include "dist/offload/optimizer_window.h"

#include "core/check.h"

namespace zdl::dist {

OptimizerWindow::OptimizerWindow(int64_t budget, std::vector<Buffers> states) : states_(std::move(states)) {
  for (; k_ < states_.size(); ++k_) {
    int64_t unit = 0;
    for (const OffloadedBuffer* b : states_[k_])
      if (b) unit += b->bytes();
    if (k_ == 0) first_unit_bytes_ = unit;
    if (bytes_ + unit > budget) break;
    bytes_ += unit;
  }
  states_.resize(k_);  // only the window's units are moved here
}

void OptimizerWindow::unit_backward_done() {
  if (backward_done_ < k_) {
    try {
      for (OffloadedBuffer* b : states_[backward_done_])
        if (b) b->fetch_async();
    } catch (const OutOfMemoryError& e) {
      throw OutOfMemoryError(detail::str(e.what(), "; the optimizer offload window (", bytes_, " bytes, ", k_,
                                         " units) reads these states during the backward: a smaller window "
                                         "(--offload-window-mib) leaves more of them to the optimizer step"));
    }
  }
  ++backward_done_;
}

// The writes had the time since the step; the first forward after it waits for what is left, so
// the window's bytes leave memory at the same point of every step (a capped run's peak must not
// depend on the disk's speed), before the forward's activations pile up.
void OptimizerWindow::unit_forward_done() {
  if (!writing_) return;
  writing_ = false;
  for (const Buffers& unit : states_) settle(unit);
}

void OptimizerWindow::release_unused() {
  for (const Buffers& unit : states_)
    for (OffloadedBuffer* b : unit)
      if (b) b->evict();  // read ahead for a step that did not run: clean, so released at once
}

void OptimizerWindow::step_begins() {
  for (const Buffers& unit : states_)
    for (OffloadedBuffer* b : unit)
      if (b) {
        b->fetch_async();  // a no-op for those the backward already queued
        b->wait();
      }
  backward_done_ = 0;
}

void OptimizerWindow::step_ended() {
  for (const Buffers& unit : states_)
    for (OffloadedBuffer* b : unit)
      if (b) b->evict();
  writing_ = true;
  backward_done_ = 0;
}

}  // namespace zdl::dist

#include "dist/offload/optimizer_window.h"

namespace zdl::dist {

OptimizerWindow::OptimizerWindow(int64_t budget, std::vector<Buffers> states) : states_(std::move(states)) {
  for (; k_ < states_.size(); ++k_) {
    int64_t unit = 0;
    for (const OffloadedBuffer* b : states_[k_])
      if (b) unit += b->bytes();
    if (bytes_ + unit > budget) break;
    bytes_ += unit;
  }
  states_.resize(k_);  // only the window's units are moved here
}

// A unit still writing (the forward was shorter than the disk) becomes resident without a read:
// OffloadedBuffer's Evicting -> Resident.
void OptimizerWindow::unit_backward_done() {
  if (backward_done_ < k_)
    for (OffloadedBuffer* b : states_[backward_done_])
      if (b) b->fetch_async();
  ++backward_done_;
}

void OptimizerWindow::unit_forward_done() {
  if (!writing_) return;
  bool all = true;
  for (const Buffers& unit : states_)
    for (OffloadedBuffer* b : unit)
      if (b && !b->settle_if_done()) all = false;
  writing_ = !all;
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

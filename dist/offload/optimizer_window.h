// OptimizerWindow: optimizer offload's I/O moved out of the optimizer step, within a byte budget
// (OffloadOptions::window_bytes; docs/offload.md, "The window").
//
// Without a window the optimizer states move during the step only, one unit ahead and one behind
// ([Note: the step unit by unit] in dist/zero/zero_adamw.cpp), and the step's short compute
// cannot hide the disk. The window is the first units in update order whose states fit the budget:
// - their reads run under the backward of the step's last micro-step, one unit more each time a
//   unit's backward ends (its activations are freed then), and wait() makes them resident when
//   the step begins, so the step neither reads them nor writes them (a Resident scope leaves a
//   buffer that was already resident in memory);
// - when the step ends they are evicted: their writes run from then on, and the first unit's
//   forward of the next step waits for what is left of them and releases their bytes.
// So the window's states are in memory from the backward to the start of the next forward, where a
// step's activations are fewest, at the same points of every step whatever the disk's speed, and
// the window adds at most `budget` bytes to what the step itself holds (three units). The bytes on
// the disk and the arithmetic are those without it.
//
//   OptimizerWindow w(budget, states);  // per unit in update order: what its update reads and writes
//   w.unit_backward_done();   // post-backward hook of the step's last micro-step
//   w.unit_forward_done();    // post-forward hook
//   w.step_begins(); ... the step ... w.step_ended();
#pragma once
#include <cstdint>
#include <vector>

#include "dist/offload/offloaded_buffer.h"

namespace zdl::dist {

class OptimizerWindow {
 public:
  using Buffers = std::vector<OffloadedBuffer*>;
  // `states[i]`: the offloaded buffers unit i's update reads and writes (master, moments).
  OptimizerWindow(int64_t budget, std::vector<Buffers> states);

  size_t units() const { return k_; }  // units 0 .. k-1
  int64_t bytes() const { return bytes_; }

  // A unit's backward ended in the step's last micro-step: the next window unit's read is queued.
  void unit_backward_done();
  // A unit's forward ended: the first after a step finishes the window's writes, releasing them.
  void unit_forward_done();
  void step_begins();  // the window's reads are waited for: its units are resident for the step
  void step_ended();   // the window's units are evicted: their writes run from now on
  // The gradients are zeroed: states read ahead for a step that did not run (a skipped
  // non-finite step) leave memory; after a step this does nothing.
  void release_unused();
  // The bytes of unit 0's states: the smallest window that holds a unit.
  int64_t first_unit_bytes() const { return first_unit_bytes_; }

 private:
  std::vector<Buffers> states_;
  size_t k_ = 0;
  int64_t bytes_ = 0;
  int64_t first_unit_bytes_ = 0;
  size_t backward_done_ = 0;  // units whose backward ended since the last step
  bool writing_ = false;      // the window's writes of the last step are not settled yet
};

}  // namespace zdl::dist

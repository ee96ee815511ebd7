// BatchPosition: where the batch being computed sits in the training run, so every random draw
// of a forward (dropout) is keyed by the data, never by who computes it.
//
// [Note: dropout position] Under data parallelism a rank computes some rows of a step, and
// with gradient accumulation some micro-batch of them. A mask keyed by the local element index
// would drop the same positions of every rank's rows (and differ from one process's mask), so a
// training loop declares the position of its rows instead:
//
//   nn::BatchPosition pos(step, first_sequence, seed);  // rows [first, first + B) of step `step`
//   Tensor loss = model->loss(x, y);                    // and its backward
//
// While it is alive, Dropout keys row j of its input [B, ...] by (seed, module, step, call
// within the position, first_sequence + j): the mask is the same whatever the split into ranks
// and micro-batches, and a resumed run needs only the step (and the run's seed) to continue it.
// The module is its registration order (not the init seed), so a model built from another
// init seed and loaded from a checkpoint draws the same masks.
// Without a position, Dropout counts its own calls (Dropout::calls; save them to resume).
#pragma once
#include <cstdint>

namespace zdl::nn {

class BatchPosition {
 public:
  BatchPosition(int64_t step, int64_t first_sequence, uint64_t seed = 0);
  // What a position is, to enter it again later: a position made from a Record has the same
  // id, so random counters continue as they were recorded (activation checkpointing replays a
  // forward in backward, after the position that ran it is gone).
  struct Record {
    int64_t step, first_sequence;
    uint64_t seed, id;
  };
  explicit BatchPosition(const Record& r);
  Record record() const { return {step, first_sequence, seed, id}; }
  ~BatchPosition();
  BatchPosition(const BatchPosition&) = delete;
  BatchPosition& operator=(const BatchPosition&) = delete;

  // The innermost position alive on this thread, or nullptr.
  static const BatchPosition* current();

  // While alive, no position is current on this thread (activation checkpointing replays a
  // forward that ran outside any position from inside the backward, which may run in one).
  class Hide {
   public:
    Hide();
    ~Hide();
    Hide(const Hide&) = delete;
    Hide& operator=(const Hide&) = delete;

   private:
    const BatchPosition* prev_;
  };

  const int64_t step;
  const int64_t first_sequence;
  const uint64_t seed;  // the run's seed for random draws in forward
  const uint64_t id;  // distinct for every position made in this process

 private:
  const BatchPosition* prev_;
};

}  // namespace zdl::nn

// Learning-rate schedule of GPT-2-style training: linear warmup, then cosine decay to min_lr.
//
//   optim::CosineSchedule sched{.max_lr = 3e-4, .min_lr = 3e-5, .warmup = 100, .total = 5000};
//   opt.set_lr(sched.lr(step));      // step is 0-based
#pragma once
#include <cstdint>

namespace zdl::optim {

struct CosineSchedule {
  double max_lr = 1e-3;
  double min_lr = 1e-4;
  int64_t warmup = 0;
  int64_t total = 1;

  // warmup: max_lr * (step + 1) / warmup; then cosine from max_lr to min_lr at `total`;
  // min_lr afterwards.
  double lr(int64_t step) const;
};

}  // namespace zdl::optim

#include "optim/schedule.h"

#include <cmath>

namespace zdl::optim {

double CosineSchedule::lr(int64_t step) const {
  if (step < warmup) return max_lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (step >= total) return min_lr;
  double span = static_cast<double>(total - warmup);
  double progress = span > 0 ? static_cast<double>(step - warmup) / span : 1.0;
  return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace zdl::optim

// The description of a train_gpt run: on the console (rank 0) and as the metrics log's first line.
#pragma once
#include <cstdint>

#include "core/device.h"
#include "examples/train_gpt/session.h"

namespace zdl::train_gpt {

void announce(const Session& x, const DeviceInfo& gpu, int64_t first_step);

}  // namespace zdl::train_gpt

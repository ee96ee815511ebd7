// train_gpt's training: steps from `first_step` to --steps (or --stop-after) through the
// library's step (dist::Trainer), each followed by its console line and metrics line, and the
// evaluations and checkpoints the flags ask for. Errors here are failures: exit 1. A SIGINT or
// SIGTERM on any rank (inside an io::InterruptScope) ends it after the step, saved if --save is set.
#pragma once
#include <cstdint>

#include "core/device.h"
#include "examples/train_gpt/session.h"
#include "io/progress.h"

namespace zdl::train_gpt {

// `gpu`: the device's description (its peak rate gives MFU; none on the CPU). Collective.
// Returns 0, or the signal that stopped it (every rank the same).
int train(Session& x, int64_t first_step, const DeviceInfo& gpu, io::Progress& progress);

}  // namespace zdl::train_gpt

// The walkthrough's table [4]: per stage, the largest n_layer whose per-rank peak fits under
// --cap-mib, predicted from three small measured runs and confirmed by training under the cap
// (L* trains, L*+1 runs out of memory), without and with activation checkpointing; then DDP's
// out-of-memory error and ZeRO-3 training the model ZeRO-3 fits.
#pragma once
#include "examples/zero_walkthrough/args.h"
#include "examples/zero_walkthrough/report.h"
#include "examples/zero_walkthrough/stage_run.h"

namespace zdl::walkthrough {

// Collective.
void run_cap_experiment(Report& rep, const Args& a, Walkthrough& w);

}  // namespace zdl::walkthrough

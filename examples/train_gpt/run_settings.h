// The flags that fix a run's trajectory besides the model and the seed (data, dtype, steps,
// batch, sequence, schedule, optimizer, accumulation, reduction), saved in a checkpoint so that
// --resume continues the run it saved without repeating them.
#pragma once
#include <string>
#include <vector>

#include "examples/train_gpt/args.h"

namespace zdl::train_gpt {

// The settings as a JSON object (a checkpoint's metadata["run"]).
std::string run_settings_json(const Args& a);

// A resumed run takes each setting its command line did not give from `saved` (run_settings_json's
// text; a checkpoint without it leaves the flags as they are). Returns, for the log, each flag
// given with another value than the checkpoint's ("--batch 8 (the checkpoint's: 16)").
std::vector<std::string> adopt_run_settings(Args& a, const CLI::App& app, const std::string& saved);

}  // namespace zdl::train_gpt

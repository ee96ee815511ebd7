// train_gpt's model config: the checkpoint's (--resume), the GPT-2 file's (--init-from) or the
// flags' (a new model's vocabulary is the data's: 256 bytes; for llm.c shards the --tokenizer's
// (`tokenizer_vocab` > 0), else GPT-2's 50257, padded to a multiple of 128 as llm.c does). A
// shape flag that disagrees with a checkpoint or a file is refused, never silently ignored.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/token_files.h"
#include "examples/train_gpt/args.h"
#include "io/checkpoint.h"
#include "nn/gpt.h"

namespace zdl::train_gpt {

// --resume, before the data is opened: reads the checkpoint's train state into `resumed` and
// takes the run settings it saved for every flag not given (examples/train_gpt/run_settings.h);
// returns the flags given with other values, for the log. Throws io::UsageError.
std::vector<std::string> read_checkpoint_state(Args& a, const CLI::App& app, std::optional<io::TrainState>& resumed);

// The model: the checkpoint's (after read_checkpoint_state; takes its seed into a.seed), a GPT-2
// file's (pointing a.init_from at the weights of a Hugging Face-style directory) or the flags'.
// Throws io::UsageError.
nn::GPTConfig model_config(Args& a, const CLI::App& app, std::optional<io::TrainState>& resumed,
                           data::TokenFormat format, int64_t tokenizer_vocab);

}  // namespace zdl::train_gpt

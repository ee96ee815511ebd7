// train_gpt's model config: the checkpoint's (--resume), the GPT-2 file's (--init-from) or the
// flags' (a new model's vocabulary is the data's: 256 bytes; for llm.c shards the --tokenizer's
// (`tokenizer_vocab` > 0), else GPT-2's 50257, padded to a multiple of 128 as llm.c does). A
// shape flag that disagrees with a checkpoint or a file is refused, never silently ignored.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>

#include "data/token_files.h"
#include "examples/train_gpt/args.h"
#include "io/checkpoint.h"
#include "nn/gpt.h"

namespace zdl::train_gpt {

// Reads --resume's train state into `resumed` (and takes its seed into a.seed), or points
// a.init_from at the weights of a Hugging Face-style directory. Throws io::UsageError.
nn::GPTConfig model_config(Args& a, const CLI::App& app, std::optional<io::TrainState>& resumed,
                           data::TokenFormat format, int64_t tokenizer_vocab);

}  // namespace zdl::train_gpt

// --sample: text the trained model generates, printed by rank 0: bytes on text, tokens through
// --tokenizer on llm.c shards.
#pragma once
#include <CLI/CLI.hpp>

#include "examples/train_gpt/session.h"

namespace zdl::train_gpt {

// Collective under ZeRO-3: every rank runs the model.
void print_sample(Session& x, const CLI::App& app);

}  // namespace zdl::train_gpt

// Autoregressive sampling from a GPT: temperature and top-k, driven by the counter-based RNG
// so a (seed, prompt) pair always gives the same text.
//
//   std::vector<int64_t> ids = nn::generate(*model, prompt_ids, {.max_new_tokens = 200, .top_k = 40});
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "nn/gpt.h"

namespace zdl::nn {

struct SampleOptions {
  int64_t max_new_tokens = 100;
  double temperature = 1.0;  // > 0; lower is greedier
  int64_t top_k = 0;         // 0: whole vocabulary
  uint64_t seed = 0;
  // Called with each new id as it is drawn (e.g. to print a long sample as it grows).
  std::function<void(int64_t)> on_token;
};

// Returns prompt + generated ids. The context is cropped to the model's block_size.
std::vector<int64_t> generate(GPT& model, std::vector<int64_t> prompt, const SampleOptions& o);

}  // namespace zdl::nn

// The least memory a GPT's training takes per rank (nn/gpt_memory.h): what train_gpt checks a
// model against before building it.
#include "nn/gpt_memory.h"

#include <gtest/gtest.h>

namespace zdl::nn {
namespace {

TEST(GptMemory, StatesOverTheRanksPlusOneMicroBatchOfLogits) {
  const GPTConfig c{.vocab_size = 256, .block_size = 64, .n_layer = 2, .n_head = 2, .n_embd = 32};
  const TrainingMemoryFloor f = training_memory_floor(c, /*batch=*/8, /*seq=*/64, /*world=*/4);
  EXPECT_DOUBLE_EQ(f.parameters, c.num_parameters());
  EXPECT_DOUBLE_EQ(f.states, 16 * c.num_parameters() / 4);
  EXPECT_DOUBLE_EQ(f.logits, 2.0 * 64 * 256 * 8);  // 8 / 4 rows per rank
  EXPECT_DOUBLE_EQ(f.total(), f.states + f.logits);
}

TEST(GptMemory, AtLeastOneRowAndThePaddedVocabulary) {
  const GPTConfig c{.vocab_size = 50257, .padded_vocab_size = 50304, .block_size = 16, .n_layer = 1, .n_head = 1,
                    .n_embd = 8};
  EXPECT_DOUBLE_EQ(training_memory_floor(c, /*batch=*/2, /*seq=*/16, /*world=*/8).logits, 1.0 * 16 * 50304 * 8);
}

// The logits and their gradient are in the compute dtype: 4 bytes an entry in bf16, not f32's 8
// (which refused bf16 runs that fit: tests/examples/train_gpt_cli_test.py).
TEST(GptMemory, LogitsTakeTwoElementsOfTheComputeDtypeAnEntry) {
  const GPTConfig c{.vocab_size = 256, .block_size = 64, .n_layer = 2, .n_head = 2, .n_embd = 32};
  EXPECT_DOUBLE_EQ(training_memory_floor(c, 8, 64, 4, false, /*element_bytes=*/2).logits, 2.0 * 64 * 256 * 4);
  EXPECT_DOUBLE_EQ(training_memory_floor(c, 8, 64, 4, false, /*element_bytes=*/4).logits, 2.0 * 64 * 256 * 8);
}

// Offloaded optimizer states (host or NVMe) leave the parameters and gradients, s bytes each:
// 8 bytes a parameter in f32, 4 in bf16, over the ranks.
TEST(GptMemory, OffloadedOptimizerStatesLeaveParametersAndGradients) {
  const GPTConfig c{.vocab_size = 256, .block_size = 64, .n_layer = 2, .n_head = 2, .n_embd = 32};
  EXPECT_DOUBLE_EQ(training_memory_floor(c, 8, 64, 4, /*optimizer_offloaded=*/true).states, 8 * c.num_parameters() / 4);
  EXPECT_DOUBLE_EQ(training_memory_floor(c, 8, 64, 4, true, /*element_bytes=*/2).states, 4 * c.num_parameters() / 4);
  EXPECT_DOUBLE_EQ(training_memory_floor(c, 8, 64, 4, false, 2).states, 16 * c.num_parameters() / 4);
}

}  // namespace
}  // namespace zdl::nn

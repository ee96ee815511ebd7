// nn::generate: reproducible for a seed, greedy at top_k = 1 (and as temperature -> 0), never
// a padding id, the context cropped to block_size, the module's mode restored, clear errors.
#include <gtest/gtest.h>

#include "error_of.h"
#include "nn/parameter_factory.h"
#include "nn/sampling.h"

namespace zdl::nn {

namespace {

std::shared_ptr<GPT> small_model() {
  InitContext ctx(/*seed=*/11);
  // Padded head: ids 7 and 8 exist in the logits' storage but are no tokens.
  auto m = std::make_shared<GPT>(GPTConfig{.vocab_size = 7, .padded_vocab_size = 9, .block_size = 6, .n_layer = 1,
                                           .n_head = 2, .n_embd = 8});
  NoGradGuard ng;
  uint64_t s = 50;
  for (auto& p : m->parameters()) p.copy_(Tensor::randn(p.shape(), s++, p.dtype(), Device::cpu(), 0, 0.0, 0.5));
  return m;
}

// The argmax of the last position's logits for this context (cropped as generate crops it).
int64_t greedy_next(GPT& m, const std::vector<int64_t>& ids) {
  NoGradGuard ng;
  const int64_t T = std::min<int64_t>(static_cast<int64_t>(ids.size()), m.config.block_size);
  std::vector<int64_t> ctx(ids.end() - T, ids.end());
  std::vector<double> last = slice(m.logits(Tensor::from_vector(ctx, {1, T}, DType::I64)), 1, T - 1, T).to_vector();
  return std::max_element(last.begin(), last.end()) - last.begin();
}

}  // namespace

TEST(Generate, ReproducibleForASeedAndOtherForAnother) {
  auto m = small_model();
  const std::vector<int64_t> prompt{1, 2, 3};
  auto a = generate(*m, prompt, {.max_new_tokens = 40, .seed = 5});
  auto b = generate(*m, prompt, {.max_new_tokens = 40, .seed = 5});
  auto c = generate(*m, prompt, {.max_new_tokens = 40, .seed = 6});
  ASSERT_EQ(a.size(), prompt.size() + 40);
  EXPECT_TRUE(std::equal(prompt.begin(), prompt.end(), a.begin()));  // prompt + generated
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  for (int64_t id : a) EXPECT_TRUE(id >= 0 && id < 7) << id << " is a padding row, not a token";
}

TEST(Generate, TopKOneAndTinyTemperatureAreGreedyOverACroppedContext) {
  auto m = small_model();
  // A prompt longer than block_size (6): the context is its last 6 ids.
  const std::vector<int64_t> prompt{0, 1, 2, 3, 4, 5, 6, 0};
  auto greedy = generate(*m, prompt, {.max_new_tokens = 12, .top_k = 1, .seed = 1});
  std::vector<int64_t> want = prompt;
  for (int i = 0; i < 12; ++i) want.push_back(greedy_next(*m, want));
  EXPECT_EQ(greedy, want);
  EXPECT_EQ(generate(*m, prompt, {.max_new_tokens = 12, .temperature = 1e-4, .seed = 2}), want);
}

TEST(Generate, RestoresTheModeAndRejectsBadOptions) {
  auto m = small_model();
  m->train();
  generate(*m, {1}, {.max_new_tokens = 2});
  EXPECT_TRUE(m->is_training());
  using testing::error_of;
  EXPECT_NE(error_of([&] { generate(*m, {1}, {.temperature = 0}); }).find("temperature must be > 0"), std::string::npos);
  EXPECT_NE(error_of([&] { generate(*m, {1}, {.top_k = -1}); }).find("top_k must be >= 0"), std::string::npos);
  EXPECT_NE(error_of([&] { generate(*m, {}, {}); }).find("at least one token"), std::string::npos);
}

}  // namespace zdl::nn

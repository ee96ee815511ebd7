// GPT end to end: finite-difference gradients on a tiny f64 model, shapes, and errors.
#include <gtest/gtest.h>

#include <cmath>

#include "nn/gpt.h"
#include "nn/parameter_factory.h"

namespace zdl::nn {

namespace {

GPTConfig tiny() { return GPTConfig{.vocab_size = 7, .block_size = 6, .n_layer = 2, .n_head = 2, .n_embd = 6}; }

Tensor ids_of(std::vector<int64_t> v, int64_t B, int64_t T) { return Tensor::from_vector(v, {B, T}, DType::I64); }

}  // namespace

TEST(GPT, GradientsMatchFiniteDifferencesInF64) {
  std::shared_ptr<GPT> model;
  {
    InitContext ctx(/*seed=*/3, Device::cpu(), DType::F64);
    GPTConfig cfg = tiny();
    cfg.padded_vocab_size = 9;  // exercise the padded head too
    model = std::make_shared<GPT>(cfg);
  }
  // Larger weights than GPT-2's 0.02 so every path contributes measurably.
  {
    NoGradGuard ng;
    uint64_t s = 100;
    for (auto& [n, p] : model->named_parameters())
      if (n.find("ln") == std::string::npos) p.copy_(Tensor::randn(p.shape(), s++, DType::F64, Device::cpu(), 0, 0.0, 0.3));
  }
  Tensor ids = ids_of({1, 2, 3, 4, 5, 0, 6, 6, 2, 1}, 2, 5);
  Tensor tgt = ids_of({2, 3, 4, 5, 0, 6, 6, 2, 1, 3}, 2, 5);
  model->zero_grad();
  model->loss(ids, tgt).backward();

  const double h = 1e-6;
  double worst = 0;
  for (auto& [name, p] : model->named_parameters()) {
    auto g = p.grad().to_vector();
    double* data = p.data<double>();
    // Every element of every parameter.
    for (int64_t i = 0; i < p.numel(); ++i) {
      double orig = data[i];
      double lp, lm;
      {
        NoGradGuard ng;
        data[i] = orig + h;
        lp = model->loss(ids, tgt).item();
        data[i] = orig - h;
        lm = model->loss(ids, tgt).item();
        data[i] = orig;
      }
      double num = (lp - lm) / (2 * h);
      // Relative per element, as tests/gradcheck.h judges (elements below 0.01 against 0.01).
      double err = std::abs(num - g[i]) / std::max(1e-2, std::abs(num));
      worst = std::max(worst, err);
      EXPECT_LT(err, 1e-6) << name << "[" << i << "]: analytic " << g[i] << " numeric " << num;
    }
  }
  RecordProperty("worst_rel_error", std::to_string(worst));
}

TEST(GPT, ShapesTiedHeadAndParameterCount) {
  GPTConfig cfg = tiny();
  auto model = std::make_shared<GPT>(cfg);
  Tensor logits = model->logits(ids_of({1, 2, 3, 4, 5, 6}, 2, 3));
  EXPECT_EQ(logits.shape(), (Shape{2, 3, 7}));
  // Tied: the LM head is wte, counted once.
  const int64_t C = 6, L = 2, V = 7, T = 6;
  int64_t per_block = 2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * C + (4 * C * C + 4 * C) + (4 * C * C + C);
  EXPECT_EQ(model->num_parameters(), V * C + T * C + L * per_block + 2 * C);
  EXPECT_EQ(cfg.num_parameters(), static_cast<double>(model->num_parameters()));  // the count without a model
  GPTConfig nobias = cfg;
  nobias.bias = false;
  nobias.padded_vocab_size = 16;
  EXPECT_EQ(nobias.num_parameters(), static_cast<double>(std::make_shared<GPT>(nobias)->num_parameters()));
  EXPECT_EQ(model->named_parameters().front().first, "wte.weight");
  EXPECT_EQ(model->named_parameters()[2].first, "h.0.ln_1.weight");
}

TEST(GPT, ResidualProjectionsUseScaledInit) {
  GPTConfig cfg{.vocab_size = 50, .block_size = 16, .n_layer = 8, .n_head = 4, .n_embd = 64};
  auto model = std::make_shared<GPT>(cfg);
  auto stddev = [](const Tensor& t) {
    auto v = t.to_vector();
    double s = 0;
    for (double x : v) s += x * x;
    return std::sqrt(s / v.size());
  };
  EXPECT_NEAR(stddev(model->h[0]->mlp->c_fc->weight), 0.02, 0.001);
  EXPECT_NEAR(stddev(model->h[0]->mlp->c_proj->weight), 0.02 / std::sqrt(16.0), 0.0005);
  EXPECT_NEAR(stddev(model->h[3]->attn->c_proj->weight), 0.02 / std::sqrt(16.0), 0.0005);
}

TEST(GPT, BadConfigsAndInputsGiveClearErrors) {
  GPTConfig bad = tiny();
  bad.n_embd = 7;
  try {
    GPT m(bad);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("n_embd 7 must be a positive multiple of n_head 2"), std::string::npos)
        << e.what();
  }
  auto model = std::make_shared<GPT>(tiny());
  EXPECT_THROW(model->logits(ids_of(std::vector<int64_t>(14, 1), 2, 7)), Error);  // T > block_size
  EXPECT_THROW(model->logits(ids_of({1, 2, 9, 1}, 2, 2)), Error);                 // id >= vocab
  EXPECT_THROW(model->loss(ids_of({1, 2, 3, 1}, 2, 2), ids_of({1, 2}, 1, 2)), Error);
}

}  // namespace zdl::nn

// Optimizers against the update rules written out in double, schedule, clipping, state; and
// what they refuse.
#include <gtest/gtest.h>

#include <cmath>

#include "nn/gpt.h"
#include "optim/clip.h"
#include "optim/optimizer.h"
#include "optim/param_groups.h"
#include "optim/schedule.h"
#include "error_of.h"

namespace zdl::optim {

using ::zdl::testing::error_of;

namespace {
Tensor leaf(const Shape& s, uint64_t seed, DType t = DType::F32) {
  Tensor p = Tensor::randn(s, seed, t);
  p.set_requires_grad(true);
  p.set_name("p" + std::to_string(seed));
  return p;
}
}  // namespace

TEST(AdamW, MatchesTheUpdateRuleOverSeveralSteps) {
  // Reference (as torch.optim.AdamW): m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
  // p = p (1 - lr wd) - lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps)
  Tensor w = leaf({5, 3}, 1), b = leaf({5}, 2);
  AdamWOptions o{.lr = 0.01, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8};
  AdamW opt({{"decay", {w}, 0.1}, {"no_decay", {b}, 0.0}}, o);
  std::vector<double> pw = w.to_vector(), pb = b.to_vector();
  std::vector<double> mw(15, 0), vw(15, 0), mb(5, 0), vb(5, 0);
  auto ref = [&](std::vector<double>& p, std::vector<double>& m, std::vector<double>& v, const std::vector<double>& g,
                 double wd, int t) {
    for (size_t i = 0; i < p.size(); ++i) {
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      v[i] = 0.95 * v[i] + 0.05 * g[i] * g[i];
      double bc1 = 1 - std::pow(0.9, t), bc2 = 1 - std::pow(0.95, t);
      p[i] = p[i] * (1 - 0.01 * wd) - 0.01 / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + 1e-8);
    }
  };
  for (int t = 1; t <= 4; ++t) {
    opt.zero_grad();
    Tensor x = Tensor::randn({4, 3}, 10 + t);
    sum(square(linear(x, w, b))).backward();
    auto gw = w.grad().to_vector(), gb = b.grad().to_vector();
    opt.step();
    ref(pw, mw, vw, gw, 0.1, t);
    ref(pb, mb, vb, gb, 0.0, t);
    auto aw = w.to_vector(), ab = b.to_vector();
    for (size_t i = 0; i < aw.size(); ++i) EXPECT_NEAR(aw[i], pw[i], 1e-6) << "step " << t << " w[" << i << "]";
    for (size_t i = 0; i < ab.size(); ++i) EXPECT_NEAR(ab[i], pb[i], 1e-6) << "step " << t << " b[" << i << "]";
  }
  EXPECT_EQ(opt.step_count(), 4);
}

TEST(AdamW, GradScaleEqualsScaledGradients) {
  Tensor a = leaf({7}, 3), b = leaf({7}, 3);
  AdamW oa({{"g", {a}, 0.0}}, {.lr = 0.1}), ob({{"g", {b}, 0.0}}, {.lr = 0.1});
  a.set_grad(Tensor::full({7}, 0.5));
  b.set_grad(Tensor::full({7}, 0.25));
  oa.step(0.5);
  ob.step();
  EXPECT_EQ(a.to_vector(), b.to_vector());
}

TEST(AdamW, StateRoundTripsAndContinuesIdentically) {
  Tensor a = leaf({4, 4}, 5), b = leaf({4, 4}, 5);
  AdamW oa({{"g", {a}, 0.1}}, {.lr = 0.05});
  for (int t = 0; t < 3; ++t) {
    a.set_grad(Tensor::randn({4, 4}, 20 + t));
    oa.step();
  }
  AdamW ob({{"g", {b}, 0.1}}, {.lr = 0.05});
  b.copy_(a);
  ob.load_state(oa.state());
  EXPECT_EQ(ob.step_count(), 3);
  a.set_grad(Tensor::randn({4, 4}, 30));
  b.set_grad(Tensor::randn({4, 4}, 30));
  oa.step();
  ob.step();
  EXPECT_EQ(a.to_vector(), b.to_vector());
  // State lives in flat buffers accounted as optimizer state: 2 kinds x 16 floats.
  auto st = oa.state();
  EXPECT_EQ(st[0].first, "p5.exp_avg");
  EXPECT_EQ(st[0].second.storage()->category(), MemoryCategory::OptimizerState);
}

// Unnamed parameters (or two with one name) each get a key of their own: they used to share
// ".exp_avg", and a load gave both the moments of one.
TEST(AdamW, StateKeysNameEveryParameterOnceEvenWithoutNames) {
  auto unnamed = [](uint64_t seed) {
    Tensor p = Tensor::randn({3}, seed);
    p.set_requires_grad(true);
    return p;
  };
  Tensor a1 = unnamed(1), a2 = unnamed(2), a3 = leaf({3}, 3), a4 = leaf({3}, 3);  // a3, a4 both "p3"
  Tensor b1 = unnamed(1), b2 = unnamed(2), b3 = leaf({3}, 3), b4 = leaf({3}, 3);
  AdamW oa({{"g", {a1, a2}, 0.0}, {"h", {a3, a4}, 0.0}}, {.lr = 0.1});
  std::vector<Tensor> as{a1, a2, a3, a4}, bs{b1, b2, b3, b4};
  for (size_t i = 0; i < as.size(); ++i) as[i].set_grad(Tensor::randn({3}, 50 + i));
  oa.step();
  std::vector<std::string> keys;
  for (auto& [k, t] : oa.state()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"group0.param0.exp_avg", "group0.param0.exp_avg_sq",
                                            "group0.param1.exp_avg", "group0.param1.exp_avg_sq",
                                            "group1.param0.exp_avg", "group1.param0.exp_avg_sq",
                                            "group1.param1.exp_avg", "group1.param1.exp_avg_sq", "step"}));
  AdamW ob({{"g", {b1, b2}, 0.0}, {"h", {b3, b4}, 0.0}}, {.lr = 0.1});
  for (size_t i = 0; i < as.size(); ++i) bs[i].copy_(as[i]);
  ob.load_state(oa.state());
  for (size_t i = 0; i < as.size(); ++i) {
    as[i].set_grad(Tensor::randn({3}, 60 + i));
    bs[i].set_grad(Tensor::randn({3}, 60 + i));
  }
  oa.step();
  ob.step();
  for (size_t i = 0; i < as.size(); ++i) EXPECT_EQ(as[i].to_vector(), bs[i].to_vector()) << i;
}

// A strided parameter (a slice with a step) had its neighbours in the storage updated instead,
// a parameter listed twice was updated twice, and NaN hyperparameters turned every parameter
// into NaN: each is refused.
TEST(Optimizer, RefusesWhatItWouldUpdateWrong) {
  Tensor base = Tensor::zeros({6});
  Tensor strided = slice(base, 0, 0, 6, 2);
  strided.set_requires_grad(true);
  EXPECT_NE(error_of([&] { SGD({{"g", {strided}, 0.0}}, {.lr = 1.0}); })
                .find("parameter #0 (unnamed) of group 'g' of shape=[3] is not contiguous"),
            std::string::npos);  // a tensor without a name is named by its place (it was "parameter ''")
  Tensor w = leaf({3}, 1);
  EXPECT_NE(error_of([&] { SGD({{"g", {w, w}, 0.0}}, {.lr = 1.0}); }).find("is listed twice, in group 'g' and in group 'g'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { AdamW({{"a", {w}, 0.0}, {"b", {w}, 0.1}}, {.lr = 1e-3}); }).find("in group 'a' and in group 'b'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { AdamW({{"a", {w}, std::nan("")}}, {.lr = 1e-3}); }).find("weight decay nan"), std::string::npos);
  AdamW opt({{"a", {w}, 0.0}}, {.lr = 1e-3});
  for (double lr : {std::nan(""), -1.0, HUGE_VAL})
    EXPECT_NE(error_of([&] { opt.set_lr(lr); }).find("lr must be a finite number >= 0"), std::string::npos) << lr;
  EXPECT_EQ(opt.lr(), 1e-3);
  sum(w).backward();
  const std::vector<double> before = w.to_vector();
  EXPECT_NE(error_of([&] { opt.step(std::nan("")); }).find("grad_scale must be a finite number >= 0"), std::string::npos);
  EXPECT_EQ(w.to_vector(), before);
  Tensor a = leaf({2}, 2), b = leaf({2}, 3);  // two views of one storage at different offsets are two parameters
  SGD({{"g", {a, b}, 0.0}}, {.lr = 1.0});
}

// A step writes the parameters in place: a graph built before it saved the old values, and its
// backward must refuse them, as after any in-place write (it used to run through the new
// weights silently: the GAN pattern, step one model then backward through it).
TEST(Optimizer, AStepMakesAGraphThatSavedTheParametersRefuseItsBackward) {
  for (int kind = 0; kind < 2; ++kind) {
    Tensor x = leaf({1, 2}, 5), w = leaf({2, 1}, 6);
    std::unique_ptr<Optimizer> opt;
    if (kind == 0) opt = std::make_unique<SGD>(std::vector<ParamGroup>{{"g", {w}, 0.0}}, SGDOptions{.lr = 1.0});
    else opt = std::make_unique<AdamW>(std::vector<ParamGroup>{{"g", {w}, 0.0}}, AdamWOptions{.lr = 1e-3});
    Tensor y = sum(matmul(x, w));  // saves w for x's gradient
    w.set_grad(Tensor::ones({2, 1}));
    opt->step();
    const std::string msg = error_of([&] { y.backward(); });
    EXPECT_NE(msg.find("changed in place after the forward"), std::string::npos) << kind << ": " << msg;
    EXPECT_NE(msg.find("p6"), std::string::npos) << msg;  // names the parameter
    // A forward after the step is fine.
    x.set_grad(Tensor());
    sum(matmul(x, w)).backward();
    EXPECT_TRUE(x.grad().defined());
  }
}

TEST(SGD, MomentumMatchesRule) {
  Tensor p = leaf({3}, 7);
  SGD opt({{"g", {p}, 0.0}}, {.lr = 0.1, .momentum = 0.9});
  auto ref = p.to_vector();
  std::vector<double> buf(3, 0);
  for (int t = 0; t < 3; ++t) {
    Tensor g = Tensor::randn({3}, 40 + t);
    p.set_grad(g);
    auto gv = g.to_vector();
    opt.step();
    for (int i = 0; i < 3; ++i) {
      buf[i] = 0.9 * buf[i] + gv[i];
      ref[i] -= 0.1 * buf[i];
    }
  }
  auto got = p.to_vector();
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(got[i], ref[i], 1e-6);
}

TEST(Schedule, WarmupThenCosineToMin) {
  CosineSchedule s{.max_lr = 1.0, .min_lr = 0.1, .warmup = 10, .total = 110};
  EXPECT_DOUBLE_EQ(s.lr(0), 0.1);
  EXPECT_DOUBLE_EQ(s.lr(9), 1.0);
  EXPECT_DOUBLE_EQ(s.lr(10), 1.0);
  EXPECT_NEAR(s.lr(60), 0.55, 1e-12);
  EXPECT_NEAR(s.lr(110), 0.1, 1e-12);
  EXPECT_NEAR(s.lr(500), 0.1, 1e-12);
}

TEST(Clip, GlobalNormAndScale) {
  Tensor a = leaf({2}, 8), b = leaf({1}, 9);
  a.set_grad(Tensor::from_vector(std::vector<double>{3, 0}, {2}));
  b.set_grad(Tensor::from_vector(std::vector<double>{4}, {1}));
  EXPECT_DOUBLE_EQ(grad_norm({a, b}), 5.0);
  EXPECT_EQ(clip_scale(0.5, 1.0), 1.0);
  EXPECT_EQ(clip_scale(1.0, 1.0), 1.0);
  EXPECT_EQ(clip_scale(5.0, 0.0), 1.0);
}

// The one clip formula (ZeRO's clip_grad_norm calls it too): max_norm / (norm + 1e-6). Within
// 4 ulps, so dropping or changing the epsilon fails: at norm 5 it moves the result by 2e-7
// relative, and at norms near the epsilon it decides the result (0.25 with it, 1/3 without).
TEST(Clip, ScaleIsMaxNormOverNormPlusEpsilon) {
  EXPECT_DOUBLE_EQ(clip_scale(5.0, 1.0), 1.0 / 5.000001);
  EXPECT_DOUBLE_EQ(clip_scale(3e-6, 1e-6), 0.25);
}

TEST(ParamGroups, DecayOnlyOnMatrices) {
  nn::GPTConfig cfg{.vocab_size = 11, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 4};
  nn::GPT model(cfg);
  auto groups = decay_groups(model, 0.1);
  ASSERT_EQ(groups.size(), 2u);
  for (auto& p : groups[0].params) EXPECT_EQ(p.dim(), 2) << p.name();
  for (auto& p : groups[1].params) EXPECT_EQ(p.dim(), 1) << p.name();
  EXPECT_EQ(groups[0].params.size() + groups[1].params.size(), model.named_parameters().size());
  // A frozen parameter is left out: AdamW refused the groups of a model with one ("must be a
  // leaf that requires grad").
  model.wte->weight.set_requires_grad(false);
  groups = decay_groups(model, 0.1);
  EXPECT_EQ(groups[0].params.size() + groups[1].params.size(), model.named_parameters().size() - 1);
  AdamW opt(groups, {.lr = 1e-3});
}

}  // namespace zdl::optim

// Activation checkpointing: gradients bit-identical to the plain backward (dropout on, with and
// without a BatchPosition, nested, modules whose inputs need no gradient), the memory it saves
// equal to the closed forms, hooks in their order, and clear errors.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <optional>

#include "dist/zero/closed_forms.h"
#include "nn/activation_checkpoint.h"
#include "nn/batch_position.h"
#include "nn/gpt.h"
#include "nn/parameter_factory.h"

namespace zdl::nn {
namespace {

std::shared_ptr<GPT> make_gpt(int64_t n_layer, double dropout = 0.0, int64_t C = 16, int64_t NH = 2) {
  InitContext ctx(3);
  return std::make_shared<GPT>(
      GPTConfig{.vocab_size = 32, .block_size = 16, .n_layer = n_layer, .n_head = NH, .n_embd = C, .dropout = dropout});
}

Tensor token_ids(int64_t B, int64_t T, int64_t salt) {
  std::vector<int64_t> v(static_cast<size_t>(B * T));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>((i * 7 + static_cast<size_t>(salt) * 3) % 32);
  return Tensor::from_vector(v, {B, T}, DType::I64);
}

// Two Linears with the same init; the second checkpointed.
std::pair<std::shared_ptr<Linear>, std::shared_ptr<Linear>> twin_linears(uint64_t seed, int64_t in, int64_t out) {
  std::shared_ptr<Linear> made[2];
  for (auto& m : made) {
    InitContext ctx(seed);
    m = std::make_shared<Linear>(LinearOptions{in, out});
  }
  made[1]->set_activation_checkpointing();
  return {made[0], made[1]};
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor x = a.contiguous_copy(), y = b.contiguous_copy();
  return std::memcmp(x.raw_data(), y.raw_data(), static_cast<size_t>(x.numel()) * element_size(x.dtype())) == 0;
}

// Two training iterations' losses and gradients (dropout draws continue from one to the next).
struct Grads {
  std::vector<double> losses;
  std::vector<std::pair<std::string, Tensor>> grads;
};
Grads two_iterations(GPT& model, bool with_position) {
  Grads r;
  for (int it = 0; it < 2; ++it) {
    std::optional<BatchPosition> pos;
    if (with_position) pos.emplace(it, 0, 99);
    model.zero_grad();
    Tensor loss = model.loss(token_ids(2, 16, it), token_ids(2, 16, it + 1));
    loss.backward();
    r.losses.push_back(loss.item());
    for (auto& [n, p] : model.named_parameters()) r.grads.emplace_back(detail::str(it, ":", n), p.grad().contiguous_copy());
  }
  return r;
}

void expect_same(const Grads& got, const Grads& want, const std::string& what) {
  EXPECT_EQ(got.losses, want.losses) << what;
  ASSERT_EQ(got.grads.size(), want.grads.size());
  for (size_t i = 0; i < want.grads.size(); ++i)
    EXPECT_TRUE(same_bits(got.grads[i].second, want.grads[i].second)) << what << ": gradient " << want.grads[i].first;
}

}  // namespace

TEST(ActivationCheckpoint, GradientsAreBitIdenticalWithDropout) {
  for (bool with_position : {true, false}) {
    auto plain = make_gpt(3, 0.2);
    const Grads want = two_iterations(*plain, with_position);
    for (int64_t every : {1, 2}) {
      auto model = make_gpt(3, 0.2);
      checkpoint_every(model->h, every);
      expect_same(two_iterations(*model, with_position), want,
                  detail::str("every ", every, with_position ? " under a BatchPosition" : " counting calls"));
    }
  }
}

TEST(ActivationCheckpoint, NestedCheckpointsAndMixedModulesAreBitIdentical) {
  auto plain = make_gpt(2, 0.1);
  const Grads want = two_iterations(*plain, true);
  auto model = make_gpt(2, 0.1);
  model->h[0]->set_activation_checkpointing();
  model->h[0]->mlp->set_activation_checkpointing();  // inside a checkpointed block
  model->h[1]->attn->set_activation_checkpointing();  // a part of a block only
  expect_same(two_iterations(*model, true), want, "nested");
}

TEST(ActivationCheckpoint, ParametersGetGradientsWhenTheInputNeedsNone) {
  auto [plain, ckpt] = twin_linears(5, 4, 3);
  Tensor x = Tensor::randn({2, 4}, 1);  // needs no gradient
  sum((*plain)(x)).backward();
  Tensor y = (*ckpt)(x);
  ASSERT_TRUE(y.requires_grad());
  sum(y).backward();
  EXPECT_TRUE(same_bits(ckpt->weight.grad(), plain->weight.grad()));
  EXPECT_TRUE(same_bits(ckpt->bias.grad(), plain->bias.grad()));
}

TEST(ActivationCheckpoint, WithoutGradModeItIsAPlainForward) {
  auto model = make_gpt(2);
  checkpoint_every(model->h, 1);
  NoGradGuard ng;
  Tensor loss = model->loss(token_ids(2, 8, 0), token_ids(2, 8, 1));
  EXPECT_FALSE(loss.requires_grad());
}

// The module's backward hooks bracket the recompute: the pre-hook fires before it (ZeRO-3
// gathers there), the post-backward hook after the last parameter's gradient (and frees there).
TEST(ActivationCheckpoint, RecomputeRunsBetweenTheModulesBackwardHooks) {
  auto model = make_gpt(2);
  model->h[1]->set_activation_checkpointing();
  std::vector<std::string> events;
  model->h[1]->register_backward_pre_hook([&](Module&) { events.push_back("pre"); });
  model->h[1]->register_post_backward_hook([&](Module&) { events.push_back("post"); });
  model->h[1]->ln_1->register_forward_pre_hook([&](Module&, const TensorList&) { events.push_back("forward"); });
  Tensor loss = model->loss(token_ids(2, 8, 0), token_ids(2, 8, 1));
  EXPECT_EQ(events, (std::vector<std::string>{"forward"}));
  loss.backward();
  EXPECT_EQ(events, (std::vector<std::string>{"forward", "pre", "forward", "post"}));
}

// A module called twice (shared weights): right gradients, unless its parameters carry
// post-accumulate hooks (a ZeRO unit's), which two recomputes would fire too early: refused.
TEST(ActivationCheckpoint, AModuleCalledTwiceWorksUnlessHooksWouldFireTooEarly) {
  auto [plain, ckpt] = twin_linears(6, 4, 4);
  Tensor x = Tensor::randn({3, 4}, 2).set_requires_grad(true);
  sum((*plain)(gelu((*plain)(x)))).backward();
  const Tensor want = x.grad().contiguous_copy();
  x.set_grad(Tensor());
  sum((*ckpt)(gelu((*ckpt)(x)))).backward();
  EXPECT_TRUE(same_bits(x.grad(), want));
  EXPECT_TRUE(same_bits(ckpt->weight.grad(), plain->weight.grad()));

  ckpt->register_post_backward_hook([](Module&) {});
  Tensor once = (*ckpt)(x);
  try {
    (*ckpt)(once);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("called a second time before the backward"), std::string::npos) << e.what();
  }
  sum(once).backward();  // the first call's graph still works
  Tensor again = (*ckpt)(x);  // and after its backward, the module checkpoints again
  sum(again).backward();
}

// Integer outputs pass through a checkpointed module without a gradient, and a forward run
// outside any BatchPosition recomputes outside one even when the backward runs inside one.
TEST(ActivationCheckpoint, IntegerOutputsAndAForwardOutsideAnyPosition) {
  struct Tagged : Module {
    std::shared_ptr<Dropout> drop;
    Tagged() : Module("Tagged") {
      InitContext ctx(8);
      drop = register_module("drop", std::make_shared<Dropout>(0.5));
    }
    TensorList run(const Tensor& x, const Tensor& ids) {
      return call({x, ids}, [this](const TensorList& in) { return TensorList{(*drop)(mul(in[0], 3.0)), in[1]}; });
    }
  };
  Tagged plain, ckpt;
  ckpt.set_activation_checkpointing();
  Tensor ids = Tensor::from_vector(std::vector<int64_t>{1, 2, 3}, {3}, DType::I64);
  Tensor x1 = Tensor::randn({3, 8}, 4).set_requires_grad(true), x2 = x1.detach().contiguous_copy().set_requires_grad(true);
  TensorList a = plain.run(x1, ids), b = ckpt.run(x2, ids);
  EXPECT_FALSE(b[1].requires_grad());
  EXPECT_TRUE(same_bits(a[0], b[0]));
  {
    BatchPosition pos(5, 0, 77);  // the backward inside a position the forward did not see
    sum(a[0]).backward();
    sum(b[0]).backward();
  }
  EXPECT_TRUE(same_bits(x1.grad(), x2.grad()));
}

// A forward that changes between the pass and its recompute is named, not differentiated wrongly.
// The recompute reads the checkpointed module's input and parameters again: one changed in place
// after the forward would be recomputed from the new values (wrong gradients, silently); it is
// refused, naming the module.
TEST(ActivationCheckpoint, AnInputOrParameterChangedInPlaceIsRefused) {
  for (int what = 0; what < 2; ++what) {
    auto [plain, ckpt] = twin_linears(5, 3, 2);
    Tensor x = Tensor::randn({4, 3}, 6, DType::F32);
    x.set_requires_grad(true);
    Tensor h = mul(x, 1.0);
    Tensor y = sum((*ckpt)(h));
    if (what == 0) h.fill_(1.0);
    else ckpt->weight.fill_(0.5);
    try {
      y.backward();
      ADD_FAILURE() << "no error, case " << what;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("ActivationCheckpoint(Linear)"), std::string::npos) << msg;
      EXPECT_NE(msg.find("changed in place"), std::string::npos) << msg;
    }
  }
}

TEST(ActivationCheckpoint, AForwardThatChangesShapeIsAClearError) {
  struct Unsteady : Module {
    int calls = 0;
    Unsteady() : Module("Unsteady") {}
    Tensor forward(const Tensor& x) override { return ++calls == 1 ? mul(x, 2.0) : slice(x, 1, 0, 2); }
  };
  Unsteady m;
  m.set_activation_checkpointing();
  Tensor x = Tensor::randn({2, 3}, 1);
  x.set_requires_grad(true);
  Tensor y = m(x);
  try {
    sum(y).backward();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ActivationCheckpoint(Unsteady): output 0 of the recompute has shape=[2,2]"),
              std::string::npos)
        << e.what();
  }
}

// What forward keeps, and the peak of a training step, against the closed forms
// (dist::block_activation_bytes): a plain block keeps (17 C + NH + 4) s per token (16 C with one
// token or one head, whose [T, C] layout is a view), a checkpointed one its input (C s); the peak
// with every block checkpointed is a one-block model's peak plus the L saved inputs. (T = 1 and
// NH = 1 failed zero_walkthrough's own check.)
TEST(ActivationCheckpoint, ActivationMemoryFollowsTheClosedForms) {
  const int64_t B = 2;
  for (auto [C, NH, T] : std::vector<std::array<int64_t, 3>>{{16, 2, 16}, {24, 3, 16}, {32, 4, 16}, {16, 1, 16},
                                                              {16, 2, 1}, {16, 1, 1}}) {
    const dist::BlockActivations form = dist::block_activation_bytes(B, T, C, NH, 4);
    std::array<std::array<int64_t, 5>, 2> kept{}, peak{};  // [checkpointed][L]
    for (int ck = 0; ck < 2; ++ck)
      for (int64_t L = 1; L <= 4; ++L) {
        auto model = make_gpt(L, 0.0, C, NH);
        checkpoint_every(model->h, ck);
        const int64_t base = memory_ledger().stats(Device::cpu()).current_of(MemoryCategory::Activation);
        memory_ledger().reset_peaks(Device::cpu());
        Tensor loss = model->loss(token_ids(B, T, 0), token_ids(B, T, 1));
        kept[ck][L] = memory_ledger().stats(Device::cpu()).current_of(MemoryCategory::Activation) - base;
        loss.backward();
        peak[ck][L] = memory_ledger().stats(Device::cpu()).peak_of(MemoryCategory::Activation) - base;
      }
    for (int64_t L = 2; L <= 4; ++L) {
      EXPECT_EQ(kept[0][L] - kept[0][L - 1], form.kept) << "C=" << C << " NH=" << NH << " T=" << T << " L=" << L;
      EXPECT_EQ(kept[1][L] - kept[1][L - 1], form.checkpointed) << "C=" << C << " NH=" << NH << " T=" << T << " L=" << L;
      EXPECT_EQ(peak[0][L] - peak[0][L - 1], form.kept) << "C=" << C << " NH=" << NH << " T=" << T << " L=" << L;
    }
    for (int64_t L = 1; L <= 4; ++L)
      EXPECT_EQ(peak[1][L], peak[0][1] + L * form.checkpointed) << "C=" << C << " NH=" << NH << " T=" << T << " L=" << L;
  }
}

}  // namespace zdl::nn

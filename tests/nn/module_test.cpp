// Module: registration rules, names, state dicts, printing, and the hooks ZeRO relies on.
#include <gtest/gtest.h>
#include <omp.h>

#include "nn/gpt.h"
#include "nn/parameter_factory.h"
#include "error_of.h"

namespace zdl::nn {

namespace {

// The example from nn/module.h: a user's model in a few lines.
struct TwoLayer : Module {
  std::shared_ptr<Linear> fc1, fc2;
  TwoLayer() : Module("TwoLayer") {
    fc1 = register_module("fc1", std::make_shared<Linear>(8, 16));
    fc2 = register_module("fc2", std::make_shared<Linear>(16, 1));
  }
  Tensor forward(const Tensor& x) override { return (*fc2)(gelu((*fc1)(x))); }
};

using ::zdl::testing::error_of;

}  // namespace

TEST(Module, NamesAreDottedAndInRegistrationOrder) {
  auto m = std::make_shared<TwoLayer>();
  auto named = m->named_parameters();
  std::vector<std::string> names;
  for (auto& [n, t] : named) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}));
  EXPECT_EQ(m->fc1->weight.name(), "fc1.weight");
  EXPECT_EQ(m->fc1->weight.storage()->label(), "fc1.weight");
  EXPECT_EQ(m->num_parameters(), 8 * 16 + 16 + 16 + 1);
  auto mods = m->named_modules();
  ASSERT_EQ(mods.size(), 3u);
  EXPECT_EQ(mods[1].first, "fc1");
  EXPECT_NE(m->to_string().find("(fc2): Linear(in=16, out=1, bias=true)"), std::string::npos) << m->to_string();
}

// A module under two parents is listed once, under the first path named_parameters() reaches;
// the tensors' own names (in every error message) must say the same. They used to follow the
// last registration, whichever parent that was.
TEST(Module, AModuleUnderTwoParentsIsNamedByItsFirstPathEverywhere) {
  struct Holder : Module {
    explicit Holder(std::shared_ptr<Linear> fc) : Module("Holder") { register_module("fc", std::move(fc)); }
  };
  for (bool first_registered_first : {true, false}) {
    auto fc = std::make_shared<Linear>(2, 2);
    auto a = std::make_shared<Holder>(fc), b = std::make_shared<Holder>(fc);  // a registers fc first
    Tensor mask = Tensor::zeros({3});  // a buffer two modules share is listed once, as parameters are
    a->register_buffer("mask", mask);
    b->register_buffer("mask", mask);
    auto root = std::make_shared<Module>("Root");
    root->register_module("e1", first_registered_first ? a : b);
    root->register_module("e2", first_registered_first ? b : a);
    auto named = root->named_parameters();
    ASSERT_EQ(named.size(), 2u);
    EXPECT_EQ(named[0].first, "e1.fc.weight");
    for (auto& [n, t] : named) {
      EXPECT_EQ(t.name(), n) << first_registered_first;
      EXPECT_EQ(t.storage()->label(), n);
    }
    auto buffers = root->named_buffers();
    ASSERT_EQ(buffers.size(), 1u);
    EXPECT_EQ(buffers[0].first, "e1.mask");
    EXPECT_EQ(root->state_dict().size(), 3u);
  }
}

TEST(Module, RejectsBadNames) {
  Module m("M");
  EXPECT_NE(error_of([&] { m.register_parameter("", {2}, Init::zeros()); }).find("empty"), std::string::npos);
  EXPECT_NE(error_of([&] { m.register_parameter("a.b", {2}, Init::zeros()); }).find("'a.b'"), std::string::npos);
  m.register_parameter("w", {2}, Init::zeros());
  EXPECT_NE(error_of([&] { m.register_buffer("w", Tensor::zeros({1})); }).find("already"), std::string::npos);
  EXPECT_NE(error_of([&] { m.register_module("x.y", std::make_shared<Module>()); }).find("'x.y'"), std::string::npos);
}

// A cycle (a -> b -> a, or a longer one) made every walk of the tree recurse until the stack
// overflowed (named_parameters, train()).
TEST(Module, ACycleOfModulesIsRefused) {
  auto a = std::make_shared<Module>("A"), b = std::make_shared<Module>("B"), c = std::make_shared<Module>("C");
  a->register_module("b", b);
  b->register_module("c", c);
  for (auto* parent : {b.get(), c.get()})
    EXPECT_NE(error_of([&] { parent->register_module("back", a); }).find("holds this module among its descendants"),
              std::string::npos);
  EXPECT_EQ(a->named_modules().size(), 3u);  // nothing was registered
  a->train(false);
}

// A module on the stack has no shared_ptr to give: std::bad_weak_ptr came out with no zdl message.
TEST(Module, AModuleOnTheStackSaysItNeedsASharedPtr) {
  Linear l(3, 2);
  EXPECT_NE(error_of([&] { l.named_modules(); }).find("needs the module to be owned by a std::shared_ptr"),
            std::string::npos);
  EXPECT_EQ(l.named_modules(false).size(), 0u);
  EXPECT_EQ(l.named_parameters().size(), 2u);
}

TEST(Module, StateDictRoundTripAndStrictErrorsNameEverything) {
  auto a = std::make_shared<TwoLayer>();
  auto b = std::make_shared<TwoLayer>();
  std::map<std::string, Tensor> sd;
  for (auto& [n, t] : a->state_dict()) sd[n] = t;
  b->load_state_dict(sd);
  EXPECT_EQ(b->fc1->weight.to_vector(), a->fc1->weight.to_vector());

  auto bad = sd;
  bad.erase("fc1.bias");
  bad["extra.weight"] = Tensor::zeros({1});
  bad["fc2.weight"] = Tensor::zeros({2, 16});
  auto before = b->fc1->weight.to_vector();
  std::string msg = error_of([&] { b->load_state_dict(bad); });
  EXPECT_NE(msg.find("missing: fc1.bias"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unexpected: extra.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fc2.weight (expected [1,16], got [2,16])"), std::string::npos) << msg;
  EXPECT_EQ(b->fc1->weight.to_vector(), before);  // nothing loaded
}

TEST(Module, TrainEvalPropagates) {
  auto m = std::make_shared<TwoLayer>();
  m->eval();
  EXPECT_FALSE(m->fc1->is_training());
  m->train();
  EXPECT_TRUE(m->fc2->is_training());
}

TEST(Module, InitIsDeterministicPerContextAndShardable) {
  GPTConfig cfg{.vocab_size = 11, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 6};
  std::shared_ptr<GPT> a, b;
  {
    InitContext ctx(5);
    a = std::make_shared<GPT>(cfg);
  }
  {
    InitContext ctx(5);
    b = std::make_shared<GPT>(cfg);
  }
  auto pa = a->named_parameters(), pb = b->named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_EQ(pa[i].second.to_vector(), pb[i].second.to_vector()) << pa[i].first;
  // A slice of a parameter can be initialized alone (what a ZeRO-3 rank does for its shard).
  Tensor w = a->h[1]->mlp->c_fc->weight;  // (4C, C)
  auto full = w.to_vector();
  Tensor shard = Tensor::empty({10});
  // Streams are assigned in registration order, which named_parameters() preserves.
  uint64_t stream = 0;
  for (auto& [n, t] : a->named_parameters()) {
    if (n == "h.1.mlp.c_fc.weight") break;
    ++stream;
  }
  init_elements(Init::normal(0.0, 0.02), 5, stream, 7, shard);
  auto s = shard.to_vector();
  for (int i = 0; i < 10; ++i) EXPECT_EQ(s[i], full[7 + i]) << i;
}

TEST(Module, InitGivesTheSameBitsOnAnyThreadCount) {
  // Threads take shares of a tensor's elements; each element is a function of its index alone.
  // An odd size, large enough to be split, in f32 and f64, from an offset (a ZeRO-3 shard).
  for (DType dt : {DType::F32, DType::F64, DType::BF16}) {
    for (const Init& init : {Init::normal(0.0, 0.02), Init::uniform(-0.5, 0.25)}) {
      SCOPED_TRACE(init.str() + " " + dtype_name(dt));
      std::vector<std::vector<double>> got;
      for (int threads : {1, 3}) {
        omp_set_num_threads(threads);
        Tensor t = Tensor::empty({100003}, dt);
        init_elements(init, 11, 2, 12345, t);
        got.push_back(t.to_vector());
      }
      omp_set_num_threads(2);
      EXPECT_EQ(got[0], got[1]);
      // The offset is the element index: the tail of a longer tensor from 0 has the same values.
      Tensor whole = Tensor::empty({12345 + 100003}, dt);
      init_elements(init, 11, 2, 0, whole);
      std::vector<double> w = whole.to_vector();
      EXPECT_EQ(std::vector<double>(w.begin() + 12345, w.end()), got[0]);
    }
  }
}

TEST(Module, HooksFireInOrderAndPostBackwardOncePerPass) {
  auto m = std::make_shared<TwoLayer>();
  std::vector<std::string> events;
  for (auto& entry : m->named_modules(false)) {
    std::string n = entry.first;
    Module* mod = entry.second.get();
    mod->register_forward_pre_hook([&events, n](Module&, const TensorList&) { events.push_back("pre " + n); });
    mod->register_forward_post_hook(
        [&events, n](Module&, const TensorList&, const TensorList&) { events.push_back("post " + n); });
    mod->register_backward_pre_hook([&events, n](Module&) { events.push_back("bwd_pre " + n); });
    mod->register_post_backward_hook([&events, n, mod](Module&) {
      // All of this module's gradients are complete when it fires.
      for (auto& p : mod->parameters()) EXPECT_TRUE(p.grad().defined());
      events.push_back("post_bwd " + n);
    });
  }
  Tensor x = Tensor::randn({5, 8}, 1);
  Tensor loss = sum((*m)(x));
  loss.backward();
  EXPECT_EQ(events, (std::vector<std::string>{"pre fc1", "post fc1", "pre fc2", "post fc2", "bwd_pre fc2",
                                              "post_bwd fc2", "bwd_pre fc1", "post_bwd fc1"}));
  // A second pass (gradient accumulation) fires each hook again, once.
  events.clear();
  sum((*m)(x)).backward();
  EXPECT_EQ(std::count(events.begin(), events.end(), "post_bwd fc1"), 1);
}

// Backward hooks are kept per pass, not per forward: two forwards then two backwards, or a
// retained graph run twice, fire both kinds in each pass (they used to fire in the first only:
// the second call's arming was used up by the first pass).
TEST(Module, BackwardHooksFireInEveryPassThatReachesTheModule) {
  auto m = std::make_shared<TwoLayer>();
  int pre = 0, post = 0;
  m->register_backward_pre_hook([&](Module&) { ++pre; });
  m->register_post_backward_hook([&](Module& mod) {
    for (auto& p : mod.parameters()) EXPECT_TRUE(p.grad().defined());
    ++post;
  });
  Tensor a = sum((*m)(Tensor::randn({3, 8}, 1)));
  Tensor b = sum((*m)(Tensor::randn({3, 8}, 2)));
  a.backward();
  b.backward();
  EXPECT_EQ(pre, 2);
  EXPECT_EQ(post, 2);
  pre = post = 0;
  Tensor c = sum((*m)(Tensor::randn({3, 8}, 3)));
  c.backward(Tensor(), /*retain_graph=*/true);
  c.backward();
  EXPECT_EQ(pre, 2);
  EXPECT_EQ(post, 2);
}

TEST(Module, RemovedHooksNoLongerFire) {
  auto m = std::make_shared<TwoLayer>();
  std::vector<std::string> events;
  std::vector<HookHandle> handles;
  handles.push_back(m->register_forward_pre_hook([&](Module&, const TensorList&) { events.push_back("pre"); }));
  handles.push_back(
      m->register_forward_post_hook([&](Module&, const TensorList&, const TensorList&) { events.push_back("post"); }));
  handles.push_back(m->register_backward_pre_hook([&](Module&) { events.push_back("bwd_pre"); }));
  handles.push_back(m->register_post_backward_hook([&](Module&) { events.push_back("post_bwd"); }));
  HookHandle kept = m->register_forward_pre_hook([&](Module&, const TensorList&) { events.push_back("kept"); });
  Tensor x = Tensor::randn({5, 8}, 1);
  sum((*m)(x)).backward();
  EXPECT_EQ(events, (std::vector<std::string>{"pre", "kept", "post", "bwd_pre", "post_bwd"}));
  for (HookHandle& h : handles) {
    h.remove();
    h.remove();  // twice is harmless
  }
  events.clear();
  sum((*m)(x)).backward();
  EXPECT_EQ(events, std::vector<std::string>{"kept"});
  EXPECT_TRUE(m->has_hooks());
  kept.remove();
  EXPECT_FALSE(m->has_hooks());  // every hook removed
  EXPECT_FALSE(std::make_shared<TwoLayer>()->has_hooks());
  kept = m->register_post_backward_hook([](Module&) {});
  EXPECT_TRUE(m->has_hooks());
  m.reset();
  kept.remove();  // the module is gone: a no-op
}

TEST(Module, PostBackwardWaitsForTiedWeightAndFiresForUnusedParameters) {
  GPTConfig cfg{.vocab_size = 13, .block_size = 8, .n_layer = 1, .n_head = 1, .n_embd = 4};
  auto gpt = std::make_shared<GPT>(cfg);
  int root_calls = 0;
  bool wte_ready = false;
  gpt->register_post_backward_hook([&](Module&) {
    ++root_calls;
    wte_ready = gpt->wte->weight.grad().defined();
  });
  // Unused module: registered hooks but never called in forward -> never armed, never fires;
  // a module called whose parameter gets no gradient still fires at the end of backward.
  struct Partial : Module {
    Tensor used, unused;
    Partial() : Module("Partial") {
      used = register_parameter("used", {3}, Init::ones());
      unused = register_parameter("unused", {3}, Init::ones());
    }
    Tensor forward(const Tensor& x) override { return mul(x, used); }
  };
  auto p = std::make_shared<Partial>();
  int partial_calls = 0;
  p->register_post_backward_hook([&](Module&) { ++partial_calls; });
  Tensor ids = Tensor::from_vector(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, {2, 3}, DType::I64);
  Tensor loss = add(gpt->loss(ids, ids), sum((*p)(Tensor::ones({3}))));
  loss.backward();
  EXPECT_EQ(root_calls, 1);
  EXPECT_TRUE(wte_ready);
  EXPECT_EQ(partial_calls, 1);
}

}  // namespace zdl::nn

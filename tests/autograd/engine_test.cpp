// The backward engine: accumulation, hooks, retain_graph, grad mode, and its errors; saved
// tensors changed in place before the backward.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "error_of.h"
#include "gradcheck.h"

namespace zdl {

using testing::rand_leaf;
using ::zdl::testing::error_of;

TEST(Engine, GradientsAccumulateAcrossBackwardCalls) {
  Tensor x = rand_leaf({3}, 1);
  sum(mul(x, 2.0)).backward();
  sum(mul(x, 3.0)).backward();
  for (double g : x.grad().to_vector()) EXPECT_DOUBLE_EQ(g, 5.0);
}

TEST(Engine, DiamondGraphSumsBothPaths) {
  Tensor x = rand_leaf({4}, 2);
  Tensor y = exp(x);
  Tensor z = sum(add(mul(y, 2.0), square(y)));  // dz/dx = (2 + 2y) y
  z.backward();
  auto xv = x.to_vector(), gv = x.grad().to_vector();
  for (size_t i = 0; i < xv.size(); ++i) {
    double e = std::exp(xv[i]);
    EXPECT_NEAR(gv[i], (2 + 2 * e) * e, 1e-12);
  }
}

TEST(Engine, NonScalarBackwardNeedsAGradient) {
  Tensor x = rand_leaf({2, 3}, 3);
  Tensor y = mul(x, 2.0);
  try {
    y.backward();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[2,3]"), std::string::npos) << e.what();
  }
  y.backward(Tensor::ones({2, 3}, DType::F64));
  for (double g : x.grad().to_vector()) EXPECT_DOUBLE_EQ(g, 2.0);
  EXPECT_THROW(y.backward(Tensor::ones({3, 2}, DType::F64)), Error);
}

TEST(Engine, BackwardTwiceNeedsRetainGraph) {
  Tensor x = rand_leaf({3}, 4);
  Tensor loss = sum(exp(x));
  loss.backward(Tensor(), /*retain_graph=*/true);
  loss.backward();  // graph still there
  auto g = x.grad().to_vector(), xv = x.to_vector();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], 2 * std::exp(xv[i]), 1e-12);
  try {
    loss.backward();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("retain_graph"), std::string::npos) << e.what();
  }
}

// [Note: saved tensors changed in place]: a backward refuses to compute from a tensor its op saved
// and that was changed in place since (fill_, zero_, copy_, add_, through any view of its
// storage), naming the op; a change to a tensor no backward reads, or one after the backward,
// is fine. Each case gave a wrong gradient without a word before.
TEST(Engine, ASavedTensorChangedInPlaceIsRefusedByItsBackward) {
  auto refused = [](const std::function<void()>& f, const std::string& op) {
    try {
      f();
      ADD_FAILURE() << "no error for " << op;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("backward through '" + op + "'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("changed in place after the forward"), std::string::npos) << msg;
    }
  };
  {  // mul saved h: sum(h * h) then h.fill_(0) gave gradient 0 instead of 2h
    Tensor x = rand_leaf({4}, 11);
    Tensor h = mul(x, 3.0);
    Tensor y = sum(mul(h, h));
    h.fill_(0.0);
    refused([&] { y.backward(); }, "mul");
  }
  {  // exp saved its output: add_ into it
    Tensor x = rand_leaf({3}, 12);
    Tensor e = exp(x);
    Tensor z = sum(mul(e, 2.0));
    add_(e, Tensor::ones({3}, DType::F64));
    refused([&] { z.backward(); }, "exp");
    Tensor w = rand_leaf({3}, 13);
    Tensor ew = exp(w);
    Tensor zw = sum(ew);
    slice(ew, 0, 1, 2).copy_(Tensor::zeros({1}, DType::F64));  // through a view
    refused([&] { zw.backward(); }, "exp");
  }
  {  // linear saved its input
    Tensor x = rand_leaf({2, 3}, 14), w = rand_leaf({4, 3}, 15);
    Tensor h = mul(x, 1.0);
    Tensor y = sum(linear(h, w, Tensor()));
    h.zero_();
    refused([&] { y.backward(); }, "linear");
  }
  {  // a tensor no backward reads, and a change after the backward: fine, and the gradients right
    Tensor x = rand_leaf({3}, 16);
    Tensor h = mul(x, 2.0);
    Tensor y = sum(add(h, 1.0));
    h.fill_(5.0);
    y.backward();
    for (double g : x.grad().to_vector()) EXPECT_DOUBLE_EQ(g, 2.0);
    Tensor a = rand_leaf({3}, 17);
    Tensor b = mul(a, 1.0);
    Tensor z = sum(mul(b, b));
    const std::vector<double> bv = b.to_vector();
    z.backward();
    b.fill_(0.0);
    const std::vector<double> ga = a.grad().to_vector();
    for (size_t i = 0; i < ga.size(); ++i) EXPECT_DOUBLE_EQ(ga[i], 2 * bv[i]);
  }
}

TEST(Engine, NoGradGuardRecordsNothing) {
  Tensor x = rand_leaf({3}, 5);
  Tensor y;
  {
    NoGradGuard ng;
    y = mul(x, 2.0);
  }
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(y.is_leaf());
  EXPECT_THROW(sum(y).backward(), Error);
}

TEST(Engine, QueuedCallbacksRunAfterEveryNodeInOrderAndMayQueueMore) {
  // What ZeRO's end-of-backward work relies on: callbacks run once the last node ran (every
  // leaf has its gradient), first queued first, and one may queue another, which runs too.
  Tensor x = rand_leaf({3}, 7);
  Tensor y = mul(x, 2.0);
  std::vector<std::string> order;
  y.register_hook([&](const Tensor& g) {
    EXPECT_TRUE(autograd::in_backward());
    autograd::queue_callback([&] {
      order.push_back(x.grad().defined() ? "first (x has its gradient)" : "first (too early)");
      autograd::queue_callback([&] { order.push_back("queued by first"); });
    });
    autograd::queue_callback([&] { order.push_back("second"); });
    return Tensor();
  });
  sum(y).backward();
  EXPECT_EQ(order, (std::vector<std::string>{"first (x has its gradient)", "second", "queued by first"}));
  EXPECT_FALSE(autograd::in_backward());
  // Outside a backward pass it is an error; a backward that throws drops its callbacks.
  EXPECT_THROW(autograd::queue_callback([] {}), Error);
  order.clear();
  Tensor z = mul(x, 3.0);
  z.register_hook([&](const Tensor&) -> Tensor {
    autograd::queue_callback([&] { order.push_back("must not run"); });
    throw Error("hook failed");
  });
  EXPECT_THROW(sum(z).backward(), Error);
  sum(mul(x, 1.0)).backward();  // the next backward does not run the dropped callback either
  EXPECT_TRUE(order.empty());
}

TEST(Engine, TensorHooksSeeAndReplaceGradients) {
  Tensor x = rand_leaf({3}, 6);
  Tensor y = mul(x, 2.0);
  std::vector<double> seen;
  y.register_hook([&](const Tensor& g) {
    seen = g.to_vector();
    return mul(g, 10.0);  // replaces the gradient flowing on
  });
  x.register_hook([](const Tensor& g) { return add(g, 1.0); });  // leaf hook, before accumulation
  sum(y).backward();
  EXPECT_EQ(seen, std::vector<double>(3, 1.0));
  for (double g : x.grad().to_vector()) EXPECT_DOUBLE_EQ(g, 21.0);
}

TEST(Engine, PostAccumulateGradHookRunsOncePerBackwardAfterAllContributions) {
  Tensor w = rand_leaf({3}, 7);
  int calls = 0;
  std::vector<double> at_hook;
  w.register_post_accumulate_grad_hook([&](Tensor& leaf) {
    ++calls;
    at_hook = leaf.grad().to_vector();
  });
  // w used three times: the hook must see the full sum 1 + 2 + 3 = 6.
  sum(add(add(w, mul(w, 2.0)), mul(w, 3.0))).backward();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(at_hook, std::vector<double>(3, 6.0));
}

TEST(Engine, RetainGradKeepsNonLeafGradient) {
  Tensor x = rand_leaf({3}, 8);
  Tensor y = mul(x, 3.0);
  y.retain_grad();
  Tensor z = sum(mul(y, y));
  z.backward(Tensor(), /*retain_graph=*/true);
  auto yv = y.to_vector(), gy = y.grad().to_vector();
  for (size_t i = 0; i < yv.size(); ++i) EXPECT_NEAR(gy[i], 2 * yv[i], 1e-12);
  // A second pass adds to it, as to a leaf's (it used to overwrite: 2y, where x's grad doubled).
  z.backward();
  gy = y.grad().to_vector();
  for (size_t i = 0; i < yv.size(); ++i) EXPECT_NEAR(gy[i], 4 * yv[i], 1e-12);
}

// A hook's replacement gradient is checked as the graph's own are: the op's backward trusts its
// shape and dtype (a [1] gradient for a [4096] output made gelu's backward read past its end).
TEST(Engine, GradientsOfTheWrongShapeOrDtypeFromHooksOrSeedsAreRefused) {
  Tensor x = rand_leaf({64}, 21);
  Tensor h = gelu(x);
  h.register_hook([](const Tensor&) { return Tensor::ones({1}, DType::F64); });
  std::string msg = error_of([&] { sum(h).backward(); });
  EXPECT_NE(msg.find("gradient returned by a hook for output 0 of"), std::string::npos) << msg;
  EXPECT_NE(msg.find("shape=[1] but the output has shape=[64]"), std::string::npos) << msg;
  Tensor h2 = gelu(x);
  h2.register_hook([](const Tensor& g) { return g.to(DType::F32); });
  msg = error_of([&] { sum(h2).backward(); });
  EXPECT_NE(msg.find("has dtype f32 but the output has dtype f64"), std::string::npos) << msg;
  Tensor y = mul(x, 2.0);
  msg = error_of([&] { y.backward(Tensor::ones({64}, DType::F32)); });
  EXPECT_NE(msg.find("backward: gradient dtype f32 != output dtype f64"), std::string::npos) << msg;
  Tensor leaf = rand_leaf({4}, 22);
  leaf.register_hook([](const Tensor&) { return Tensor::ones({2}, DType::F64); });
  msg = error_of([&] { sum(mul(leaf, 2.0)).backward(); });
  EXPECT_NE(msg.find("(after its hooks)"), std::string::npos) << msg;
  EXPECT_FALSE(x.grad().defined());
}

TEST(Engine, LeafGradIsAccountedAsGradientAndAccumulatesInPlace) {
  Tensor w;
  {
    MemoryScope s(MemoryCategory::Parameter);
    w = Tensor::ones({10}, DType::F32).set_requires_grad(true);
  }
  int64_t before = memory_ledger().stats(Device::cpu()).current_of(MemoryCategory::Gradient);
  sum(w).backward();
  EXPECT_EQ(memory_ledger().stats(Device::cpu()).current_of(MemoryCategory::Gradient) - before, 40);
  // A preset grad (e.g. a view into a flat buffer) is accumulated into, not replaced.
  Tensor flat = Tensor::zeros({20});
  Tensor view = slice(flat, 0, 5, 15);
  w.set_grad(view);
  sum(mul(w, 2.0)).backward();
  auto f = flat.to_vector();
  EXPECT_EQ(f[4], 0.0);
  EXPECT_EQ(f[5], 2.0);
  EXPECT_EQ(f[14], 2.0);
  EXPECT_EQ(f[15], 0.0);
}

TEST(Engine, BackwardRunsNodesNewestFirst) {
  // Two independent chains; the one built last runs first (reverse creation order).
  Tensor a = rand_leaf({2}, 9), b = rand_leaf({2}, 10);
  std::vector<char> order;
  Tensor ya = mul(a, 2.0), yb = mul(b, 2.0);
  ya.register_hook([&](const Tensor&) { order.push_back('a'); return Tensor(); });
  yb.register_hook([&](const Tensor&) { order.push_back('b'); return Tensor(); });
  autograd::backward({sum(add(ya, yb))}, {}, false);
  EXPECT_EQ(order, (std::vector<char>{'b', 'a'}));
}

}  // namespace zdl

// Neural-network ops (autograd/ops/nn.cpp): forward against plain formulas written out here,
// gradients against finite differences (f64, tests/gradcheck.h), on odd sizes, with
// non-contiguous inputs, plus the error messages and dropout's counter-based mask.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <omp.h>

#include "core/rng.h"
#include "gradcheck.h"
#include "kernels/cpu/dropout.h"

namespace zdl {

using testing::expect_gradcheck;
using testing::rand_leaf;
using testing::rand_noncontiguous_leaf;

namespace {

// Runs f, expects a zdl::Error whose message contains every one of `parts`.
template <class F>
void expect_error_containing(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "expected zdl::Error";
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

double gelu_ref(double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x))); }

Tensor ids_tensor(const std::vector<int64_t>& v, const Shape& shape, DType dt = DType::I64) {
  return Tensor::from_vector(v, shape, dt);
}

// Max |a - b| over two equally sized vectors.
double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0.0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

}  // namespace

// ---------------- gelu ----------------

TEST(Gelu, ForwardMatchesTanhFormula) {
  Tensor x = Tensor::rand({3, 5, 7}, 11, DType::F64, Device::cpu(), 0, -4.0, 4.0);
  std::vector<double> xv = x.to_vector(), yv = gelu(x).to_vector();
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_NEAR(yv[i], gelu_ref(xv[i]), 1e-14);
  // f32 agrees with the f64 formula to f32 precision.
  std::vector<double> y32 = gelu(x.to(DType::F32)).to_vector();
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_NEAR(y32[i], gelu_ref(xv[i]), 1e-5);
}

TEST(Gelu, GradientsMatchFiniteDifferences) {
  auto f = [](const std::vector<Tensor>& x) { return gelu(x[0]); };
  expect_gradcheck(f, {rand_leaf({3, 5, 7}, 1, -3.0, 3.0)});
  expect_gradcheck(f, {rand_noncontiguous_leaf({3, 5, 7}, 2)});
  // Through a broadcast add: the gradient of the [7] input sums over the broadcast dims.
  expect_gradcheck([](const std::vector<Tensor>& x) { return gelu(add(x[0], x[1])); },
                   {rand_leaf({3, 5, 7}, 3), rand_leaf({7}, 4)});
}

// ---------------- layer_norm ----------------

TEST(LayerNorm, ForwardMatchesFormula) {
  const int64_t rows = 15, C = 7;
  Tensor x = Tensor::rand({3, 5, C}, 21, DType::F64, Device::cpu(), 0, -2.0, 5.0);
  Tensor w = Tensor::rand({C}, 22, DType::F64), b = Tensor::rand({C}, 23, DType::F64);
  const double eps = 1e-5;
  std::vector<double> xv = x.to_vector(), wv = w.to_vector(), bv = b.to_vector();
  std::vector<double> yv = layer_norm(x, w, b, eps).to_vector();
  for (int64_t r = 0; r < rows; ++r) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < C; ++c) m += xv[r * C + c] / C;
    for (int64_t c = 0; c < C; ++c) v += (xv[r * C + c] - m) * (xv[r * C + c] - m) / C;
    for (int64_t c = 0; c < C; ++c)
      EXPECT_NEAR(yv[r * C + c], (xv[r * C + c] - m) / std::sqrt(v + eps) * wv[c] + bv[c], 1e-12);
  }
  // Undefined bias means bias 0; f32 agrees with f64.
  std::vector<double> nob = layer_norm(x, w, Tensor(), eps).to_vector();
  std::vector<double> y32 = layer_norm(x.to(DType::F32), w.to(DType::F32), b.to(DType::F32), eps).to_vector();
  for (int64_t i = 0; i < rows * C; ++i) {
    EXPECT_NEAR(nob[i], yv[i] - bv[i % C], 1e-12);
    EXPECT_NEAR(y32[i], yv[i], 1e-5);
  }
}

TEST(LayerNorm, GradientsMatchFiniteDifferences) {
  auto f = [](const std::vector<Tensor>& x) { return layer_norm(x[0], x[1], x[2]); };
  expect_gradcheck(f, {rand_leaf({3, 5, 7}, 31), rand_leaf({7}, 32), rand_leaf({7}, 33)});
  expect_gradcheck(f, {rand_noncontiguous_leaf({3, 5, 7}, 34), rand_leaf({7}, 35), rand_leaf({7}, 36)});
  // Rows with a large mean and a broadcast shift feeding x; no bias.
  expect_gradcheck(
      [](const std::vector<Tensor>& x) { return layer_norm(add(mul(x[0], 3.0), x[1]), x[2], Tensor()); },
      {rand_leaf({4, 9}, 37), rand_leaf({4, 1}, 38, 10.0, 20.0), rand_leaf({9}, 39)});
}

TEST(LayerNorm, ShapeMismatchNamesBothShapes) {
  Tensor x = Tensor::zeros({3, 5, 7}), w = Tensor::ones({6}), b = Tensor::zeros({7});
  expect_error_containing([&] { layer_norm(x, w, b); }, {"weight", "[6]", "[3,5,7]"});
  expect_error_containing([&] { layer_norm(x, b, Tensor::zeros({7, 1})); }, {"bias", "[7,1]", "[3,5,7]"});
  expect_error_containing([&] { layer_norm(x, Tensor::ones({7}, DType::F64), b); }, {"f32", "f64"});
}

// ---------------- softmax ----------------

TEST(Softmax, ForwardMatchesFormulaAlongEveryDim) {
  Tensor x = Tensor::rand({3, 5, 7}, 41, DType::F64, Device::cpu(), 0, -3.0, 3.0);
  std::vector<double> xv = x.to_vector();
  const Shape s = {3, 5, 7}, st = {35, 7, 1};
  for (int64_t d = 0; d < 3; ++d) {
    Tensor y = softmax(x, d);
    ASSERT_EQ(y.shape(), s);
    std::vector<double> yv = y.to_vector();
    for (int64_t i = 0; i < 105; ++i) {
      // Element i's softmax along d: exp(x_i) / sum_k exp(x with coordinate d = k).
      int64_t coord = (i / st[d]) % s[d], base = i - coord * st[d];
      double den = 0;
      for (int64_t k = 0; k < s[d]; ++k) den += std::exp(xv[base + k * st[d]]);
      EXPECT_NEAR(yv[i], std::exp(xv[i]) / den, 1e-14) << "dim " << d << " element " << i;
    }
  }
}

TEST(Softmax, LargeLogitsStayFinite) {
  Tensor x = Tensor::from_vector(std::vector<double>{1000.0, 1001.0, 999.0, -1000.0}, {1, 4}, DType::F32);
  std::vector<double> y = softmax(x).to_vector();
  double den = std::exp(0.0) + std::exp(1.0) + std::exp(-1.0);
  EXPECT_NEAR(y[1], std::exp(1.0) / den, 1e-6);
  EXPECT_EQ(y[3], 0.0);
}

TEST(Softmax, GradientsMatchFiniteDifferences) {
  for (int64_t d : {-1, 0, 1}) {
    auto f = [d](const std::vector<Tensor>& x) { return softmax(x[0], d); };
    expect_gradcheck(f, {rand_leaf({3, 5, 7}, 51, -2.0, 2.0)});
    expect_gradcheck(f, {rand_noncontiguous_leaf({3, 5, 7}, 52)});
  }
}

TEST(Softmax, ClosureDoesNotKeepOutputAlive) {
  // Capturing `out` (instead of out.detach()) in the backward closure would form
  // out -> grad_fn -> closure -> out and leak every activation.
  std::weak_ptr<TensorImpl> weak;
  {
    Tensor x = rand_leaf({3, 5}, 53);
    Tensor y = softmax(x);
    ASSERT_NE(y.grad_fn(), nullptr);
    weak = y.impl_ptr();
  }
  EXPECT_TRUE(weak.expired());
}

// ---------------- embedding ----------------

TEST(Embedding, ForwardCopiesRowsForAnyIdShape) {
  Tensor w = Tensor::rand({7, 4}, 61, DType::F64);
  std::vector<double> wv = w.to_vector();
  std::vector<int64_t> idv = {6, 0, 3, 3, 1, 6};
  for (DType dt : {DType::I32, DType::I64}) {
    Tensor y = embedding(w, ids_tensor(idv, {2, 3}, dt));
    ASSERT_EQ(y.shape(), (Shape{2, 3, 4}));
    std::vector<double> yv = y.to_vector();
    for (size_t i = 0; i < idv.size(); ++i)
      for (int64_t c = 0; c < 4; ++c) EXPECT_EQ(yv[i * 4 + c], wv[idv[i] * 4 + c]);
  }
}

TEST(Embedding, RepeatedIdsAccumulateGradient) {
  Tensor w = rand_leaf({5, 3}, 62);
  Tensor ids = ids_tensor({1, 3, 1, 1, 0}, {5}, DType::I32);
  Tensor g = Tensor::rand({5, 3}, 63, DType::F64);
  embedding(w, ids).backward(g);
  std::vector<double> gv = g.to_vector(), dw = w.grad().to_vector();
  for (int64_t c = 0; c < 3; ++c) {
    EXPECT_DOUBLE_EQ(dw[1 * 3 + c], gv[0 * 3 + c] + gv[2 * 3 + c] + gv[3 * 3 + c]);
    EXPECT_DOUBLE_EQ(dw[3 * 3 + c], gv[1 * 3 + c]);
    EXPECT_DOUBLE_EQ(dw[0 * 3 + c], gv[4 * 3 + c]);
    EXPECT_EQ(dw[2 * 3 + c], 0.0);  // never looked up
    EXPECT_EQ(dw[4 * 3 + c], 0.0);
  }
}

TEST(Embedding, GradientsMatchFiniteDifferences) {
  Tensor ids = ids_tensor({4, 0, 4, 2, 6, 4, 0}, {7}, DType::I64);
  expect_gradcheck([ids](const std::vector<Tensor>& x) { return embedding(x[0], reshape(ids, {7, 1})); },
                   {rand_leaf({7, 5}, 64)});
  expect_gradcheck([ids](const std::vector<Tensor>& x) { return embedding(x[0], ids); },
                   {rand_noncontiguous_leaf({7, 5}, 65)});
}

TEST(Embedding, BackwardIsDeterministicAcrossThreadCounts) {
  // Many repeats of few ids: a racy or order-dependent accumulation would show in the bits.
  const int64_t n = 6000, V = 3, C = 64;
  std::vector<int64_t> idv(n);
  for (int64_t i = 0; i < n; ++i) idv[i] = (i * 7) % V;
  Tensor ids = ids_tensor(idv, {n});
  Tensor g = Tensor::rand({n, C}, 66, DType::F32);
  auto grad_with_threads = [&](int threads) {
    int prev = omp_get_max_threads();
    omp_set_num_threads(threads);
    Tensor w = Tensor::rand({V, C}, 67, DType::F32).set_requires_grad(true);
    embedding(w, ids).backward(g);
    omp_set_num_threads(prev);
    return w.grad().to_vector();
  };
  EXPECT_EQ(grad_with_threads(1), grad_with_threads(std::max(2, omp_get_max_threads())));
}

TEST(Embedding, OutOfRangeIdThrowsWithIdAndV) {
  Tensor w = Tensor::zeros({7, 4});
  expect_error_containing([&] { embedding(w, ids_tensor({0, 7, 1}, {3})); }, {"id 7", "V=7", "position 1"});
  expect_error_containing([&] { embedding(w, ids_tensor({-1}, {1}, DType::I32)); }, {"id -1", "V=7"});
  expect_error_containing([&] { embedding(w, Tensor::zeros({3})); }, {"i32 or i64", "f32"});
  expect_error_containing([&] { embedding(Tensor::zeros({7}), ids_tensor({0}, {1})); }, {"[7]", "2-D"});
}

// ---------------- cross_entropy ----------------

namespace {
// Plain reference: mean over non-ignored rows of logsumexp(x_n) - x_n[t_n].
double ce_ref(const std::vector<double>& x, const std::vector<int64_t>& t, int64_t V, int64_t ignore) {
  double total = 0;
  int64_t count = 0;
  for (size_t n = 0; n < t.size(); ++n) {
    if (t[n] == ignore) continue;
    double s = 0;
    for (int64_t v = 0; v < V; ++v) s += std::exp(x[n * V + v]);
    total += std::log(s) - x[n * V + t[n]];
    ++count;
  }
  return count ? total / count : 0.0;
}
}  // namespace

TEST(CrossEntropy, ForwardMatchesFormulaAndIsZeroDim) {
  const int64_t N = 5, V = 11;
  Tensor x = Tensor::rand({N, V}, 71, DType::F64, Device::cpu(), 0, -4.0, 4.0);
  std::vector<int64_t> tv = {3, 10, 0, 3, 7};
  for (DType dt : {DType::I32, DType::I64}) {
    Tensor loss = cross_entropy(x, ids_tensor(tv, {N}, dt));
    EXPECT_EQ(loss.shape(), Shape{});
    EXPECT_NEAR(loss.item(), ce_ref(x.to_vector(), tv, V, -1), 1e-13);
  }
  Tensor l32 = cross_entropy(x.to(DType::F32), ids_tensor(tv, {N}));
  EXPECT_EQ(l32.dtype(), DType::F32);
  EXPECT_NEAR(l32.item(), ce_ref(x.to_vector(), tv, V, -1), 1e-5);
}

TEST(CrossEntropy, IgnoreIndexSkipsRowsInLossAndGradient) {
  const int64_t N = 6, V = 7;
  std::vector<int64_t> tv = {2, -100, 6, 0, -100, 2};
  Tensor x = rand_leaf({N, V}, 72, -3.0, 3.0);
  Tensor loss = cross_entropy(x, ids_tensor(tv, {N}), /*ignore_index=*/-100);
  EXPECT_NEAR(loss.item(), ce_ref(x.to_vector(), tv, V, -100), 1e-13);
  loss.backward();
  std::vector<double> xv = x.to_vector(), g = x.grad().to_vector();
  for (int64_t n = 0; n < N; ++n) {
    double s = 0;
    for (int64_t v = 0; v < V; ++v) s += std::exp(xv[n * V + v]);
    for (int64_t v = 0; v < V; ++v) {
      // (softmax - onehot) / count, count = 4 non-ignored rows
      double want = tv[n] == -100 ? 0.0 : (std::exp(xv[n * V + v]) / s - (v == tv[n] ? 1.0 : 0.0)) / 4.0;
      EXPECT_NEAR(g[n * V + v], want, 1e-14);
    }
  }
}

TEST(CrossEntropy, GradientsMatchFiniteDifferences) {
  Tensor t = ids_tensor({4, 0, -1, 6, 4}, {5}, DType::I32);
  auto f = [t](const std::vector<Tensor>& x) { return cross_entropy(x[0], t); };
  expect_gradcheck(f, {rand_leaf({5, 7}, 73, -2.0, 2.0)});
  expect_gradcheck(f, {rand_noncontiguous_leaf({5, 7}, 74)});
  // Logits produced by a broadcast add, loss scaled afterwards (non-unit incoming gradient).
  expect_gradcheck([t](const std::vector<Tensor>& x) { return mul(cross_entropy(add(x[0], x[1]), t), 2.5); },
                   {rand_leaf({5, 7}, 75), rand_leaf({7}, 76)});
}

TEST(CrossEntropy, AllIgnoredGivesZeroLossAndZeroGradient) {
  Tensor x = rand_leaf({3, 4}, 77);
  Tensor loss = cross_entropy(x, ids_tensor({-1, -1, -1}, {3}));
  EXPECT_EQ(loss.item(), 0.0);
  loss.backward();
  for (double g : x.grad().to_vector()) EXPECT_EQ(g, 0.0);
}

TEST(CrossEntropy, BadTargetsAndShapesThrow) {
  Tensor x = Tensor::zeros({3, 5});
  expect_error_containing([&] { cross_entropy(x, ids_tensor({0, 5, 1}, {3})); }, {"target 5", "row 1", "V=5"});
  expect_error_containing([&] { cross_entropy(x, ids_tensor({0, -2, 1}, {3}), -1); }, {"target -2", "ignore_index=-1"});
  expect_error_containing([&] { cross_entropy(x, ids_tensor({0, 1}, {2})); }, {"[3,5]", "[2]"});
  expect_error_containing([&] { cross_entropy(Tensor::zeros({3, 5, 1}), ids_tensor({0, 1, 2}, {3})); },
                          {"[3,5,1]", "[3]"});
  expect_error_containing([&] { cross_entropy(x, Tensor::zeros({3})); }, {"targets", "i32 or i64"});
}

// The classes as the first num_classes columns of padded rows: the same loss and gradient bits
// as cross-entropy on the sliced (copied) logits, a zero gradient in the padding.
TEST(CrossEntropy, PaddedClassesMatchTheSlicedLogits) {
  const int64_t N = 6, V = 7, ld = 10;
  std::vector<int64_t> tv = {2, -1, 6, 0, 5, 2};
  for (DType dt : {DType::F32, DType::F64}) {
    Tensor padded = Tensor::rand({N, ld}, 81, dt, Device::cpu(), 0, -3.0, 3.0).set_requires_grad(true);
    Tensor sliced = contiguous(slice(padded, 1, 0, V)).detach().set_requires_grad(true);
    Tensor lp = cross_entropy(mul(padded, 1.0), ids_tensor(tv, {N}), -1, V);  // a product: nothing else holds it
    Tensor ls = cross_entropy(sliced, ids_tensor(tv, {N}), -1);
    EXPECT_EQ(lp.item(), ls.item()) << dtype_name(dt);
    lp.backward();
    ls.backward();
    std::vector<double> gp = padded.grad().to_vector(), gs = sliced.grad().to_vector();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t v = 0; v < ld; ++v)
        EXPECT_EQ(gp[n * ld + v], v < V ? gs[n * V + v] : 0.0) << dtype_name(dt) << " [" << n << ", " << v << "]";
  }
  expect_error_containing([] { cross_entropy(Tensor::zeros({2, 5}), ids_tensor({0, 4}, {2}), -1, 4); },
                          {"target 4", "V=4"});
  expect_error_containing([] { cross_entropy(Tensor::zeros({2, 5}), ids_tensor({0, 1}, {2}), -1, 6); },
                          {"num_classes=6", "[0, 5]"});
}

// The gradient is written over the logits only when they are dead: not over a leaf's values,
// not over logits the caller still holds, not when the graph is kept for another backward.
TEST(CrossEntropy, GradientReusesTheLogitsOnlyWhenNothingElseNeedsThem) {
  const int64_t N = 4, V = 6;
  Tensor t = ids_tensor({1, 5, 0, 3}, {N});
  Tensor x = rand_leaf({N, V}, 82, -2.0, 2.0);
  const std::vector<double> xv = x.to_vector();
  cross_entropy(x, t).backward();
  EXPECT_EQ(x.to_vector(), xv) << "a leaf's values were overwritten";
  const std::vector<double> want = x.grad().to_vector();

  Tensor y = rand_leaf({N, V}, 82, -2.0, 2.0);  // the same values
  Tensor held = mul(y, 1.0);
  const std::vector<double> held_values = held.to_vector();
  cross_entropy(held, t).backward();
  EXPECT_EQ(held.to_vector(), held_values) << "logits the caller holds were overwritten";
  EXPECT_EQ(y.grad().to_vector(), want);

  Tensor z = rand_leaf({N, V}, 82, -2.0, 2.0);
  Tensor loss = cross_entropy(mul(z, 1.0), t);
  loss.backward({}, /*retain_graph=*/true);
  EXPECT_EQ(z.grad().to_vector(), want);
  z.set_grad(Tensor());
  loss.backward();  // the saved logits must still be the logits
  EXPECT_EQ(z.grad().to_vector(), want);

  // Dead logits: the gradient takes their buffer, so the backward allocates no [N, V] for it.
  Tensor w = rand_leaf({N, V}, 82, -2.0, 2.0);
  Tensor dead_loss = cross_entropy(mul(w, 1.0), t);
  const int64_t before = memory_ledger().stats(Device::cpu()).current_of(MemoryCategory::Activation);
  memory_ledger().reset_peaks(Device::cpu());
  dead_loss.backward();
  const int64_t grown = memory_ledger().stats(Device::cpu()).peak_of(MemoryCategory::Activation) - before;
  EXPECT_EQ(w.grad().to_vector(), want);
  EXPECT_LT(grown, N * V * 8) << "the gradient did not reuse the dead logits' buffer";
}

// ---------------- dropout ----------------

TEST(Dropout, MaskFractionIsPAndKeptValuesAreScaled) {
  const int64_t n = 100000;
  for (double p : {0.1, 0.5, 0.8}) {
    std::vector<double> y = dropout(Tensor::ones({n}), p, true, 1234, 5).to_vector();
    int64_t dropped = 0;
    for (double v : y) {
      if (v == 0.0) ++dropped;
      else EXPECT_FLOAT_EQ(v, 1.0 / (1.0 - p));
    }
    // Binomial std is sqrt(p(1-p)/n) <= 0.0016; allow ~6 sigma.
    EXPECT_NEAR(static_cast<double>(dropped) / n, p, 0.01) << "p=" << p;
  }
}

TEST(Dropout, SameSeedAndStreamReproduce) {
  Tensor x = Tensor::rand({64, 33}, 81);
  auto a = dropout(x, 0.3, true, 7, 1).to_vector();
  EXPECT_EQ(a, dropout(x, 0.3, true, 7, 1).to_vector());
  EXPECT_NE(a, dropout(x, 0.3, true, 7, 2).to_vector());  // other stream
  EXPECT_NE(a, dropout(x, 0.3, true, 8, 1).to_vector());  // other seed
}

TEST(Dropout, ElementIsAPureFunctionOfItsFlatIndex) {
  const uint64_t seed = 99, stream = 3;
  const double p = 0.25;
  // Large enough to run multi-threaded; non-contiguous input: i is the index in the output.
  Tensor base = Tensor::rand({391, 257}, 82, DType::F32);
  Tensor x = transpose(base, 0, 1);  // [257, 391]
  std::vector<double> xv = x.to_vector(), y = dropout(x, p, true, seed, stream).to_vector();
  Philox gen(seed, stream);
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  for (size_t i = 0; i < y.size(); ++i) {
    float want = static_cast<double>(gen.uniform(i)) >= p ? static_cast<float>(xv[i]) * scale : 0.0f;
    ASSERT_EQ(static_cast<float>(y[i]), want) << "element " << i;
  }
  // A slice masked alone at its flat offset is bit-identical to that slice of the whole.
  std::vector<float> xs(xv.begin() + 1000, xv.begin() + 5000), ys(4000);
  kernels::cpu::dropout_forward<float>(4000, xs.data(), p, seed, stream, ys.data(), /*offset=*/1000);
  for (size_t i = 0; i < ys.size(); ++i) ASSERT_EQ(ys[i], static_cast<float>(y[1000 + i]));
}

TEST(Dropout, GradientsMatchFiniteDifferences) {
  auto f = [](const std::vector<Tensor>& x) { return dropout(x[0], 0.4, true, 5, 6); };
  expect_gradcheck(f, {rand_leaf({3, 5, 7}, 83)});
  expect_gradcheck(f, {rand_noncontiguous_leaf({3, 5, 7}, 84)});
}

TEST(Dropout, IdentityWhenNotTrainingOrPZero) {
  Tensor x = rand_leaf({3, 5}, 85);
  EXPECT_TRUE(dropout(x, 0.5, false, 1, 1).same(x));
  EXPECT_TRUE(dropout(x, 0.0, true, 1, 1).same(x));
}

TEST(Dropout, PMustBeInHalfOpenUnitInterval) {
  Tensor x = Tensor::ones({4});
  expect_error_containing([&] { dropout(x, 1.0, true, 1, 1); }, {"[0, 1)", "p=1"});
  expect_error_containing([&] { dropout(x, -0.1, true, 1, 1); }, {"[0, 1)", "p=-0.1"});
  expect_error_containing([&] { dropout(x, std::numeric_limits<double>::quiet_NaN(), false, 1, 1); }, {"[0, 1)"});
}

}  // namespace zdl

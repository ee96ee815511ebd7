// The kernel properties bit-identical training across world sizes rests on
// (docs/exactness.md): the exact sum of squares is exact and order-free, and every CPU kernel
// gives the same bits on any number of threads.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "autograd/ops.h"
#include "core/rng.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/square_sum.h"
#include "nn/batch_position.h"
#include "nn/gpt.h"
#include "nn/parameter_factory.h"
#include "optim/optimizer.h"

namespace zdl {
namespace {

using kernels::cpu::ExactSquareSum;

std::vector<float> spread_values(size_t n, uint64_t seed) {
  // Magnitudes over 2^-140 .. 2^100 (subnormals included), both signs: a double sum of the
  // squares in another order rounds differently, the exact sum must not.
  std::mt19937_64 g(seed);
  std::vector<float> v(n);
  for (auto& x : v) {
    double m = std::uniform_real_distribution<double>(0.5, 1.0)(g);
    int e = std::uniform_int_distribution<int>(-140, 60)(g);
    x = static_cast<float>(std::ldexp(g() & 1 ? m : -m, e));
  }
  return v;
}

TEST(ExactSquareSum, IntegersSumExactly) {
  std::vector<float> v;
  double want = 0;
  for (int i = -1000; i <= 1000; ++i) {
    v.push_back(static_cast<float>(i));
    want += static_cast<double>(i) * i;  // exact: < 2^53
  }
  ExactSquareSum s;
  s.add(static_cast<int64_t>(v.size()), v.data());
  EXPECT_EQ(s.value(), want);
  // The smallest subnormal's square is the fixed point's unit.
  float tiny = std::numeric_limits<float>::denorm_min();
  ExactSquareSum t;
  t.add(1, &tiny);
  EXPECT_EQ(t.value(), std::ldexp(1.0, -298));
  float big = std::numeric_limits<float>::max();
  ExactSquareSum u;
  u.add(1, &big);
  EXPECT_EQ(u.value(), static_cast<double>(big) * static_cast<double>(big));
}

TEST(ExactSquareSum, AnySplitAndOrderGivesTheSameBits) {
  std::vector<float> v = spread_values(300001, 3);
  ExactSquareSum whole;
  whole.add(static_cast<int64_t>(v.size()), v.data());
  double naive = 0;
  for (float x : v) naive += static_cast<double>(x) * x;
  EXPECT_NEAR(whole.value(), naive, 1e-12 * naive);

  // Shuffled, cut into uneven parts summed separately, merged through the serialized words
  // (as ranks do), on 1 and 3 threads.
  std::mt19937_64 g(9);
  for (int threads : {1, 3}) {
    omp_set_num_threads(threads);
    std::vector<float> w = v;
    std::shuffle(w.begin(), w.end(), g);
    std::vector<double> words(ExactSquareSum::kSerializedSize, 0.0);
    for (size_t lo = 0, k = 1; lo < w.size(); lo += 1000 * k, ++k) {
      ExactSquareSum part;
      part.add(static_cast<int64_t>(std::min(w.size() - lo, 1000 * k)), w.data() + lo);
      auto pw = part.words();
      for (size_t i = 0; i < words.size(); ++i) words[i] += pw[i];
    }
    EXPECT_EQ(ExactSquareSum::from_words(words).value(), whole.value()) << threads << " threads";
  }
  omp_set_num_threads(2);
  // A plain double sum in the shuffled order does round differently (why the exact sum exists).
  std::vector<float> w = v;
  std::shuffle(w.begin(), w.end(), g);
  double shuffled = 0;
  for (float x : w) shuffled += static_cast<double>(x) * x;
  EXPECT_NE(shuffled, naive);
}

TEST(ExactSquareSum, Bf16AndNonFinite) {
  std::vector<BFloat16> b;
  double want = 0;
  for (int i = 0; i < 200; ++i) {
    BFloat16 x(static_cast<float>(i) * 0.25f);
    b.push_back(x);
    want += static_cast<double>(static_cast<float>(x)) * static_cast<float>(x);
  }
  ExactSquareSum s;
  s.add(static_cast<int64_t>(b.size()), b.data());
  EXPECT_EQ(s.value(), want);
  EXPECT_TRUE(s.finite());
  std::vector<float> bad = {1.0f, std::numeric_limits<float>::infinity(), 2.0f};
  ExactSquareSum inf;
  inf.add(3, bad.data());
  EXPECT_FALSE(inf.finite());
  EXPECT_EQ(inf.value(), std::numeric_limits<double>::infinity());
  bad[0] = std::nanf("");
  ExactSquareSum nan;
  nan.add(3, bad.data());
  EXPECT_TRUE(std::isnan(nan.value()));
  EXPECT_THROW(ExactSquareSum::from_words({1.5}), Error);
}

// Whole chunks of the largest squares (the 64-bit per-chunk sums at their fullest) equal the
// same values summed one at a time and merged; NaN and Inf are counted wherever they fall.
TEST(ExactSquareSum, FullChunksOfLargeSquaresAndNonFiniteCounts) {
  const size_t n = 3 * (size_t{1} << 16) + 5;
  std::vector<float> v(n, std::numeric_limits<float>::max());
  for (size_t i = 0; i < n; i += 7) v[i] = -std::nextafter(std::numeric_limits<float>::max(), 0.0f);
  ExactSquareSum whole;
  whole.add(static_cast<int64_t>(n), v.data());
  // Expected: each value's own words times its count (each product < 2^50: exact).
  auto words_of = [](float x) {
    ExactSquareSum one;
    one.add(1, &x);
    return one.words();
  };
  const double others = static_cast<double>((n + 6) / 7);
  const std::vector<double> w_max = words_of(v[1]), w_other = words_of(v[0]);
  std::vector<double> words(ExactSquareSum::kSerializedSize, 0.0);
  for (size_t i = 0; i < words.size(); ++i) words[i] = (static_cast<double>(n) - others) * w_max[i] + others * w_other[i];
  EXPECT_EQ(ExactSquareSum::from_words(words).words(), whole.words());
  EXPECT_TRUE(whole.finite());

  for (size_t i : {size_t{3}, size_t{1} << 16, n - 1}) v[i] = std::nanf("");
  for (size_t i : {size_t{100}, (size_t{2} << 16) + 1}) v[i] = -std::numeric_limits<float>::infinity();
  ExactSquareSum bad;
  bad.add(static_cast<int64_t>(n), v.data());
  const std::vector<double> w = bad.words();
  EXPECT_EQ(w[ExactSquareSum::kWords], 3.0);      // NaN count
  EXPECT_EQ(w[ExactSquareSum::kWords + 1], 2.0);  // Inf count
}

// ---- thread-count invariance ----

std::vector<uint32_t> bits(const Tensor& t) {
  Tensor c = t.contiguous_copy();
  std::vector<uint32_t> out(static_cast<size_t>(c.numel()));
  std::memcpy(out.data(), c.data<float>(), out.size() * 4);
  return out;
}

template <class F>
void expect_same_bits_on_any_thread_count(const char* what, F run) {
  omp_set_num_threads(1);
  std::vector<std::vector<uint32_t>> one = run();
  for (int threads : {2, 3, 4}) {
    omp_set_num_threads(threads);
    EXPECT_TRUE(run() == one) << what << ": " << threads << " threads round differently from 1";
  }
  omp_set_num_threads(2);
}

TEST(ThreadInvariance, MatmulShapes) {
  // Large enough that the tiles (or zerodl's kernel's rows per thread) run on several threads;
  // tall, wide and square; transposed operands (the linear backward's); a batch that is split
  // over threads. On every f32 back end this CPU and build have.
  namespace kc = kernels::cpu;
  const kc::GemmBackend saved = kc::gemm_backend();
  for (kc::GemmBackend backend :
       {kc::GemmBackend::Eigen, kc::GemmBackend::Avx2, kc::GemmBackend::Avx512, kc::GemmBackend::OneDnn}) {
    if (!kc::gemm_backend_available(backend)) continue;
    kc::set_gemm_backend(backend);
    const std::string on = std::string(" on ") + kc::gemm_backend_name(backend);
    struct S { int64_t m, n, k; };
    for (S s : {S{512, 384, 768}, S{48, 2048, 384}, S{1030, 64, 96}}) {
      Tensor a = Tensor::randn({s.m, s.k}, 1), b = Tensor::randn({s.k, s.n}, 2);
      expect_same_bits_on_any_thread_count(("matmul" + on).c_str(), [&] {
        return std::vector<std::vector<uint32_t>>{bits(matmul(a, b)), bits(matmul(transpose(a, 0, 1), a)),
                                                  bits(matmul(b, transpose(b, 0, 1)))};
      });
    }
    Tensor x = Tensor::randn({6, 200, 64}, 3), y = Tensor::randn({6, 64, 200}, 4);
    expect_same_bits_on_any_thread_count(("bmm" + on).c_str(),
                                         [&] { return std::vector<std::vector<uint32_t>>{bits(matmul(x, y))}; });
  }
  kc::set_gemm_backend(saved);
}

TEST(ThreadInvariance, GptGradientsWithDropout) {
  // Attention with few heads (its backward is cut into chunks), LayerNorm, GELU, the tied
  // classifier, cross-entropy and dropout, forward and backward.
  nn::GPTConfig cfg{.vocab_size = 64, .block_size = 128, .n_layer = 2, .n_head = 2, .n_embd = 96, .dropout = 0.1};
  std::shared_ptr<nn::GPT> model;
  {
    nn::InitContext ctx(5);
    model = std::make_shared<nn::GPT>(cfg);
  }
  std::vector<int64_t> ids(2 * 129);
  Philox g(1, 2);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = g.block(i)[0] % 64;
  Tensor all = Tensor::from_vector(ids, {2, 129}, DType::I64);
  Tensor x = contiguous(slice(all, 1, 0, 128)), y = contiguous(slice(all, 1, 1, 129));
  expect_same_bits_on_any_thread_count("GPT step", [&] {
    nn::BatchPosition pos(3, 10);
    for (auto& p : model->parameters()) p.set_grad(Tensor());
    Tensor loss = model->loss(x, y);
    loss.backward();
    std::vector<std::vector<uint32_t>> out{bits(loss)};
    for (auto& p : model->parameters()) out.push_back(bits(p.grad()));
    return out;
  });
}

// The rest of the kernels a training step runs, each on inputs large enough to be split over
// threads: reductions (all elements, over a dimension), softmax and cross-entropy over a GPT-2
// sized vocabulary with their gradients, and AdamW's update.
TEST(ThreadInvariance, ReductionsSoftmaxCrossEntropyAndAdamW) {
  Tensor big = Tensor::randn({1 << 20}, 11), rows = Tensor::randn({96, 4097}, 12);
  expect_same_bits_on_any_thread_count("sum and mean", [&] {
    return std::vector<std::vector<uint32_t>>{bits(sum(big)), bits(mean(big)), bits(sum(rows, {0})),
                                              bits(sum(rows, {1})), bits(mean(rows, {0}, true))};
  });
  Tensor logits = Tensor::randn({16, 50304}, 13);
  std::vector<int64_t> t(16);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int64_t>(i * 3001 % 50304);
  Tensor targets = Tensor::from_vector(t, {16}, DType::I64);
  expect_same_bits_on_any_thread_count("softmax and cross-entropy", [&] {
    Tensor x = logits.detach().set_requires_grad(true);
    Tensor loss = cross_entropy(x, targets);
    loss.backward();
    return std::vector<std::vector<uint32_t>>{bits(softmax(logits)), bits(loss), bits(x.grad())};
  });
  expect_same_bits_on_any_thread_count("AdamW", [&] {
    Tensor w = Tensor::randn({1 << 18}, 14).set_requires_grad(true);
    optim::AdamW opt({{.name = "all", .params = {w}, .weight_decay = 0.1}}, {});
    for (uint64_t step = 0; step < 3; ++step) {
      w.set_grad(Tensor::randn({1 << 18}, 20 + step));
      opt.step();
    }
    return std::vector<std::vector<uint32_t>>{bits(w)};
  });
}

}  // namespace
}  // namespace zdl

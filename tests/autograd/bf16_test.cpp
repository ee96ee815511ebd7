// bf16 on the CPU: every differentiable op runs on bf16 inputs (natively, or computing in f32
// between casts: autograd/ops/bf16_compute.h) and matches the same op on f32 inputs holding the same
// bf16-rounded values to bf16 precision: relative L2 error < 1e-2 on the output and on every
// input gradient. Outputs are bf16 (the cross_entropy loss f32), gradients have their input's
// dtype. Also: the in-place add_/scale_ on bf16 round to nearest even, mixed bf16/f32 throws,
// and a tiny GPT runs forward and backward entirely in bf16.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <omp.h>

#include "autograd/ops.h"
#include "kernels/cpu/matmul.h"
#include "nn/gpt.h"
#include "nn/parameter_factory.h"

namespace zdl {

namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// ||a - b|| / ||b|| over all elements (0 when both are zero).
double rel_l2(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector(), y = b.to_vector();
  EXPECT_EQ(x.size(), y.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    num += (x[i] - y[i]) * (x[i] - y[i]);
    den += y[i] * y[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

// Values in [low, high), rounded to bf16 once, so the bf16 and f32 inputs are equal.
Tensor bf16_values(const Shape& shape, uint64_t seed, double low, double high) {
  return Tensor::rand(shape, seed, DType::F32, Device::cpu(), 0, low, high).to(DType::BF16);
}

struct Input {
  Shape shape;
  double low = -1.0, high = 1.0;
};

// bf16 leaves (xb) and f32 leaves holding the same values (xf), seeded from `seed` on.
void same_value_leaves(const std::vector<Input>& inputs, uint64_t seed, std::vector<Tensor>& xb,
                       std::vector<Tensor>& xf) {
  for (const Input& in : inputs) {
    Tensor b = bf16_values(in.shape, seed++, in.low, in.high);
    xf.push_back(b.to(DType::F32).set_requires_grad(true));
    xb.push_back(b.set_requires_grad(true));
  }
}

// Runs f on bf16 leaves and on f32 leaves with the same values, backpropagates the same random
// (bf16-exact) output weighting through both and compares outputs and input gradients.
// out_dtype: the dtype f must return on the bf16 inputs.
void expect_bf16_matches_f32(const std::string& what, const Fn& f, const std::vector<Input>& inputs,
                             DType out_dtype = DType::BF16) {
  SCOPED_TRACE(what);
  std::vector<Tensor> xb, xf;
  same_value_leaves(inputs, 1, xb, xf);
  Tensor yb = f(xb), yf = f(xf);
  ASSERT_EQ(yb.dtype(), out_dtype);
  ASSERT_EQ(yf.dtype(), DType::F32);
  ASSERT_EQ(yb.shape(), yf.shape());
  EXPECT_LT(rel_l2(yb, yf), 1e-2) << "forward output";

  Tensor w = bf16_values(yb.shape(), 99, -1.0, 1.0);
  yb.backward(w.to(out_dtype));
  yf.backward(w.to(DType::F32));
  for (size_t i = 0; i < xb.size(); ++i) {
    ASSERT_TRUE(xb[i].grad().defined()) << "input " << i;
    EXPECT_EQ(xb[i].grad().dtype(), DType::BF16) << "input " << i;
    EXPECT_LT(rel_l2(xb[i].grad(), xf[i].grad()), 1e-2) << "gradient of input " << i;
  }
}

Tensor ids_of(const std::vector<int64_t>& v, const Shape& shape) { return Tensor::from_vector(v, shape, DType::I64); }

}  // namespace

TEST(Bf16, ElementwiseBinaryWithBroadcasting) {
  std::vector<Input> in = {{{3, 5, 7}}, {{5, 1}, 0.5, 2.0}};
  expect_bf16_matches_f32("add", [](const auto& x) { return add(x[0], x[1]); }, in);
  expect_bf16_matches_f32("sub", [](const auto& x) { return sub(x[0], x[1]); }, in);
  expect_bf16_matches_f32("mul", [](const auto& x) { return mul(x[0], x[1]); }, in);
  expect_bf16_matches_f32("div", [](const auto& x) { return div(x[0], x[1]); }, in);
}

TEST(Bf16, ElementwiseUnaryAndScalar) {
  std::vector<Input> any = {{{4, 9}}}, pos = {{{4, 9}, 0.5, 2.0}};
  expect_bf16_matches_f32("add scalar", [](const auto& x) { return x[0] + 0.3; }, any);
  expect_bf16_matches_f32("mul scalar", [](const auto& x) { return x[0] * 1.7; }, any);
  expect_bf16_matches_f32("rsub", [](const auto& x) { return 2.0 - x[0]; }, any);
  expect_bf16_matches_f32("rdiv", [](const auto& x) { return 3.0 / x[0]; }, pos);
  expect_bf16_matches_f32("neg", [](const auto& x) { return neg(x[0]); }, any);
  expect_bf16_matches_f32("exp", [](const auto& x) { return exp(x[0]); }, any);
  expect_bf16_matches_f32("log", [](const auto& x) { return log(x[0]); }, pos);
  expect_bf16_matches_f32("sqrt", [](const auto& x) { return sqrt(x[0]); }, pos);
  expect_bf16_matches_f32("tanh", [](const auto& x) { return tanh(x[0]); }, any);
  expect_bf16_matches_f32("square", [](const auto& x) { return square(x[0]); }, any);
}

TEST(Bf16, Reductions) {
  std::vector<Input> in = {{{3, 4, 5}, 0.0, 1.0}};
  expect_bf16_matches_f32("sum all", [](const auto& x) { return sum(x[0]); }, in);
  expect_bf16_matches_f32("sum dims", [](const auto& x) { return sum(x[0], {0, 2}, /*keepdim=*/true); }, in);
  expect_bf16_matches_f32("mean all", [](const auto& x) { return mean(x[0]); }, in);
  expect_bf16_matches_f32("mean dim", [](const auto& x) { return mean(x[0], {1}); }, in);
}

TEST(Bf16, SoftmaxGeluLayerNormDropout) {
  expect_bf16_matches_f32("softmax last", [](const auto& x) { return softmax(x[0] * 3.0); }, {{{6, 10}}});
  expect_bf16_matches_f32("softmax dim 0", [](const auto& x) { return softmax(x[0], 0); }, {{{6, 10}}});
  expect_bf16_matches_f32("gelu", [](const auto& x) { return gelu(x[0] * 3.0); }, {{{5, 8}}});
  expect_bf16_matches_f32(
      "layer_norm affine", [](const auto& x) { return layer_norm(x[0], x[1], x[2]); },
      {{{2, 3, 16}}, {{16}, 0.5, 1.5}, {{16}}});
  expect_bf16_matches_f32("layer_norm plain", [](const auto& x) { return layer_norm(x[0], Tensor(), Tensor()); },
                          {{{4, 16}}});
  expect_bf16_matches_f32(
      "dropout", [](const auto& x) { return dropout(x[0], 0.25, /*training=*/true, /*seed=*/7, /*stream=*/3); },
      {{{8, 16}}});
}

TEST(Bf16, NativeKernelsGiveTheRoundedF32Bits) {
  // add, sub, mul, sum, gelu, layer_norm, dropout, embedding, causal_attention and
  // cross_entropy read and write bf16 directly (computing in f32,
  // kernels/cpu/compute_type.h): outputs and every gradient must be the f32 op's on the same
  // values, rounded to bf16 once. Sizes large enough for the threaded paths; broadcast operands
  // (their gradient a sum) included.
  // inexact: inputs whose gradient is only close, not equal: relative L2 error below 4e-3, twice
  // what two independent roundings to bf16 (unit 2^-9) leave on average.
  // out_dtype: the dtype f returns on bf16 inputs.
  auto expect_rounded_f32 = [](const std::string& what, const Fn& f, const std::vector<Input>& inputs,
                               const std::vector<size_t>& inexact = {}, DType out_dtype = DType::BF16) {
    SCOPED_TRACE(what);
    std::vector<Tensor> xb, xf;
    same_value_leaves(inputs, 11, xb, xf);
    Tensor yb = f(xb), yf = f(xf);
    ASSERT_EQ(yb.dtype(), out_dtype);
    EXPECT_EQ(yb.to_vector(), yf.to(out_dtype).to_vector()) << "forward output";
    Tensor w = bf16_values(yb.shape(), 99, -1.0, 1.0).to(out_dtype);
    yb.backward(w);
    yf.backward(w.to(DType::F32));
    for (size_t i = 0; i < xb.size(); ++i) {
      ASSERT_EQ(xb[i].grad().dtype(), DType::BF16) << "input " << i;
      if (std::find(inexact.begin(), inexact.end(), i) != inexact.end()) {
        const double e = rel_l2(xb[i].grad(), xf[i].grad());
        EXPECT_LT(e, 4e-3) << "gradient of input " << i;
      } else {
        EXPECT_EQ(xb[i].grad().to_vector(), xf[i].grad().to(DType::BF16).to_vector()) << "gradient of input " << i;
      }
    }
  };
  const Shape big = {64, 40, 24};  // 61440 elements
  expect_rounded_f32("add", [](const auto& x) { return add(x[0], x[1]); }, {{big}, {big}});
  expect_rounded_f32("add broadcast", [](const auto& x) { return add(x[0], x[1]); }, {{big}, {{40, 24}}});
  expect_rounded_f32("sub broadcast", [](const auto& x) { return sub(x[0], x[1]); }, {{big}, {{64, 1, 24}}});
  expect_rounded_f32("mul", [](const auto& x) { return mul(x[0], x[1]); }, {{big}, {big}});
  expect_rounded_f32("mul broadcast", [](const auto& x) { return mul(x[0], x[1]); }, {{big}, {{24}, 0.5, 2.0}});
  expect_rounded_f32("gelu", [](const auto& x) { return gelu(x[0]); }, {{big, -4.0, 4.0}});
  expect_rounded_f32(
      "layer_norm affine", [](const auto& x) { return layer_norm(x[0], x[1], x[2]); },
      {{big, -2.0, 3.0}, {{24}, 0.5, 1.5}, {{24}}});
  expect_rounded_f32("layer_norm plain", [](const auto& x) { return layer_norm(x[0], Tensor(), Tensor()); },
                     {{{300, 96}}});
  // Backward in whole heads (8 of them) and in chunks of a head (2 heads, 4 row blocks each).
  // dq and dk depend on rowsum(dout * out), which reads the saved output: bf16 here (as flash
  // attention's bf16 kernels read it), the unrounded f32 one in the f32 run. So those two are
  // close, not equal; dv (P^T dout) is equal.
  auto attention = [](const auto& x) {
    return causal_attention(transpose(x[0], 1, 2), transpose(x[1], 1, 2), transpose(x[2], 1, 2));
  };
  const Shape heads = {2, 130, 4, 16}, chunks = {1, 200, 2, 16};
  expect_rounded_f32("causal_attention whole heads", attention, {{heads}, {heads}, {heads}}, {0, 1});
  expect_rounded_f32("causal_attention chunked heads", attention, {{chunks}, {chunks}, {chunks}}, {0, 1});
  // The loss is f32 (from f32 sums), the logits' gradient bf16; ignored rows and padded rows.
  Tensor targets = Tensor::from_vector(std::vector<int64_t>{3, -100, 250, 0, 7, 99, 255, 12}, {8}, DType::I64);
  expect_rounded_f32("cross_entropy", [&](const auto& x) { return cross_entropy(x[0], targets, -100, 256); },
                     {{{8, 260}, -4.0, 4.0}}, {}, DType::F32);
  // Repeated ids: their rows' gradients are sums.
  Tensor ids = Tensor::from_vector(std::vector<int64_t>{5, 1, 5, 9, 0, 5, 1, 31, 5, 9, 2, 2}, {3, 4}, DType::I64);
  expect_rounded_f32("embedding", [&](const auto& x) { return embedding(x[0], ids); }, {{{32, 48}}});
  expect_rounded_f32("dropout", [](const auto& x) { return dropout(x[0], 0.3, /*training=*/true, 7, 3, 5); }, {{big}});
  expect_rounded_f32("sum rows", [](const auto& x) { return sum(x[0], {0, 1}); }, {{big}});
  expect_rounded_f32("sum last", [](const auto& x) { return sum(x[0], {2}, /*keepdim=*/true); }, {{big}});
}

TEST(Bf16, MatmulAndLinear) {
  expect_bf16_matches_f32("matmul shared b", [](const auto& x) { return matmul(x[0], x[1]); },
                          {{{2, 3, 8}}, {{8, 5}}});
  expect_bf16_matches_f32("matmul batched", [](const auto& x) { return matmul(x[0], x[1]); },
                          {{{2, 3, 8}}, {{2, 8, 5}}});
  expect_bf16_matches_f32(
      "matmul transposed operand", [](const auto& x) { return matmul(x[0], transpose(x[1], 0, 1)); },
      {{{4, 8}}, {{5, 8}}});
  expect_bf16_matches_f32("linear", [](const auto& x) { return linear(x[0], x[1], x[2]); },
                          {{{2, 3, 8}}, {{6, 8}}, {{6}}});
  expect_bf16_matches_f32("linear no bias", [](const auto& x) { return linear(x[0], x[1], Tensor()); },
                          {{{3, 8}}, {{6, 8}}});
}

TEST(Bf16, NativeGemmSumsInF32AndRoundsOnce) {
  // Where a native bf16 GEMM runs (zerodl's kernel; oneDNN's where the CPU has bf16 dot
  // products), matmul and linear take bf16 operands: every output is the exact sum of the bf16
  // products (plus the bias), summed in f32 and rounded to bf16 once. Against that sum taken in
  // double and rounded: at most one bf16 step apart (plus f32's own summation error where the
  // sum cancels), and nearly always equal. Shapes large enough to be tiled, on 1 and 3 threads:
  // the same bits.
  if (!kernels::cpu::gemm_bf16_available()) GTEST_SKIP() << "no native bf16 GEMM on this CPU or build";
  // The last two have tiles wider than the 1024 columns a tile's f32 scratch holds at a time
  // (one small untiled product; tiles of whole rows, threaded).
  for (const auto& [M, K, N] : {std::array<int64_t, 3>{300, 150, 200}, std::array<int64_t, 3>{4, 32, 1300},
                                std::array<int64_t, 3>{2100, 16, 1100}}) {
    SCOPED_TRACE(::testing::Message() << "M=" << M << " K=" << K << " N=" << N);
    Tensor a = bf16_values({M, K}, 1, -1.0, 1.0), w = bf16_values({N, K}, 2, -1.0, 1.0),
           bias = bf16_values({N}, 3, -1.0, 1.0);
    std::vector<double> av = a.to_vector(), wv = w.to_vector(), bv = bias.to_vector();
    for (bool with_bias : {false, true}) {
      SCOPED_TRACE(with_bias ? "linear with bias" : "linear without bias");
      omp_set_num_threads(1);
      std::vector<double> one = linear(a, w, with_bias ? bias : Tensor()).to_vector();
      omp_set_num_threads(3);
      Tensor y = linear(a, w, with_bias ? bias : Tensor());
      omp_set_num_threads(2);
      ASSERT_EQ(y.dtype(), DType::BF16);
      std::vector<double> got = y.to_vector();
      ASSERT_EQ(got, one) << "1 and 3 threads round differently";
      int64_t exact = 0;
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          double sum = with_bias ? bv[n] : 0.0, magnitude = std::abs(sum);
          for (int64_t k = 0; k < K; ++k) {
            sum += av[m * K + k] * wv[n * K + k];
            magnitude += std::abs(av[m * K + k] * wv[n * K + k]);
          }
          const double want = static_cast<float>(BFloat16(static_cast<float>(sum)));
          const double g = got[m * N + n];
          // One bf16 step, plus what any order of f32 additions may lose (K + 1 terms, each
          // addition off by at most 2^-24 of the running magnitude): a sum that cancels to
          // nearly nothing is only as exact as f32 sums are.
          const double ulp = std::ldexp(1.0, std::ilogb(std::max(std::abs(want), 1e-30)) - 7);
          const double f32_sums = static_cast<double>(K + 1) * std::ldexp(magnitude, -24);
          ASSERT_LE(std::abs(g - want), ulp * 1.0001 + f32_sums) << "(" << m << ", " << n << ") exact sum " << sum;
          exact += g == want;
        }
      EXPECT_GE(exact, M * N * 99 / 100);
    }
  }
  // matmul's gradients come from the same GEMM (bf16 in, bf16 out).
  expect_bf16_matches_f32("tiled matmul", [](const auto& x) { return matmul(x[0], x[1]); }, {{{300, 150}}, {{150, 200}}});
  expect_bf16_matches_f32("wide matmul", [](const auto& x) { return matmul(x[0], x[1]); }, {{{4, 32}}, {{32, 1300}}});
}

TEST(Bf16, CausalAttention) {
  // q, k, v as transposed views of [B, T, NH, HS], as the transformer produces them.
  expect_bf16_matches_f32(
      "causal_attention",
      [](const auto& x) {
        return causal_attention(transpose(x[0], 1, 2), transpose(x[1], 1, 2), transpose(x[2], 1, 2));
      },
      {{{2, 7, 2, 4}}, {{2, 7, 2, 4}}, {{2, 7, 2, 4}}});
}

TEST(Bf16, ViewsCatSplitSlice) {
  expect_bf16_matches_f32(
      "views",
      [](const auto& x) {
        Tensor a = permute(reshape(x[0], {2, 3, 4}), {2, 0, 1});           // [4, 2, 3]
        Tensor b = squeeze(unsqueeze(contiguous(transpose(a, 0, 1)), 0), 0);  // [2, 4, 3]
        return expand(slice(b, 1, 0, 4, 2), {5, 2, 2, 3});                 // [5, 2, 2, 3]
      },
      {{{6, 4}}});
  expect_bf16_matches_f32(
      "cat/split",
      [](const auto& x) {
        std::vector<Tensor> parts = split(x[0], 2, 1);  // [3, 2] [3, 2] [3, 1]
        return cat({parts[2], x[1], parts[0]}, 1);      // [3, 6]
      },
      {{{3, 5}}, {{3, 3}}});
  // Views share the bf16 storage: no copy, no cast.
  Tensor x = bf16_values({4, 6}, 1, -1.0, 1.0);
  Tensor v = transpose(slice(x, 1, 1, 5), 0, 1);
  EXPECT_EQ(v.dtype(), DType::BF16);
  EXPECT_EQ(v.storage().get(), x.storage().get());
}

TEST(Bf16, EmbeddingKeepsBf16WeightAndIntegerIds) {
  Tensor ids = ids_of({3, 0, 3, 5, 1, 3}, {2, 3});
  expect_bf16_matches_f32("embedding", [ids](const auto& x) { return embedding(x[0], ids); }, {{{6, 4}}});
  EXPECT_EQ(ids.dtype(), DType::I64);
  EXPECT_FALSE(ids.requires_grad());
}

TEST(Bf16, CrossEntropyLossIsF32GradientBf16) {
  Tensor tgt = ids_of({2, 0, 7, -1, 4}, {5});  // one ignored row
  expect_bf16_matches_f32(
      "cross_entropy", [tgt](const auto& x) { return cross_entropy(x[0] * 4.0, tgt); }, {{{5, 8}}}, DType::F32);
}

TEST(Bf16, MixedBf16AndF32Throws) {
  Tensor b = bf16_values({2, 3}, 1, -1.0, 1.0), f = Tensor::zeros({2, 3});
  auto expect_both_dtypes = [](const std::function<void()>& call, const char* what) {
    try {
      call();
      ADD_FAILURE() << what << " did not throw";
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("bf16"), std::string::npos) << what << ": " << msg;
      EXPECT_NE(msg.find("f32"), std::string::npos) << what << ": " << msg;
    }
  };
  expect_both_dtypes([&] { add(b, f); }, "add");
  expect_both_dtypes([&] { matmul(b, Tensor::zeros({3, 2})); }, "matmul");
  expect_both_dtypes([&] { linear(b, bf16_values({4, 3}, 2, -1, 1), Tensor::zeros({4})); }, "linear bias");
  expect_both_dtypes([&] { layer_norm(b, Tensor::ones({3}), Tensor()); }, "layer_norm weight");
  Tensor qb = reshape(b, {1, 1, 2, 3}), vf = reshape(f, {1, 1, 2, 3});
  expect_both_dtypes([&] { causal_attention(qb, qb, vf); }, "causal_attention");
  expect_both_dtypes([&] { add_(b, f); }, "add_");
}

TEST(Bf16, InPlaceAddRoundsToNearestEven) {
  // 1 + 3/256 lies halfway between the bf16 neighbours 1 + 2/256 and 1 + 4/256: nearest-even
  // gives 1 + 4/256 (truncation would give 1 + 2/256).
  Tensor dst = Tensor::full({3}, 1.0, DType::BF16);
  add_(dst, Tensor::full({3}, 3.0 / 256, DType::BF16));
  EXPECT_EQ(dst.to_vector(), (std::vector<double>{1 + 4.0 / 256, 1 + 4.0 / 256, 1 + 4.0 / 256}));

  // General values, broadcast source: dst = bf16(f32(dst) + f32(src)).
  Tensor d = bf16_values({4, 5}, 3, -2.0, 2.0), s = bf16_values({5}, 4, -1.0, 1.0);
  std::vector<double> dv = d.to_vector(), sv = s.to_vector(), want(20);
  for (int i = 0; i < 20; ++i) want[i] = float(BFloat16(float(dv[i]) + float(sv[i % 5])));
  add_(d, s);
  EXPECT_EQ(d.to_vector(), want);
}

TEST(Bf16, InPlaceAddIntoStridedViewOfFlatBuffer) {
  // Gradient accumulation into a bf16 flat buffer: the destination is a strided view of it
  // (every other element of rows 1..2 of a [4, 6] layout); the rest of the buffer is untouched.
  Tensor flat = bf16_values({24}, 5, -1.0, 1.0);
  std::vector<double> before = flat.to_vector();
  Tensor dst = slice(slice(view(flat, {4, 6}), 0, 1, 3), 1, 0, 6, 2);  // [2, 3], strides [6, 2]
  ASSERT_FALSE(dst.is_contiguous());
  Tensor src = bf16_values({2, 3}, 6, -1.0, 1.0);
  std::vector<double> sv = src.to_vector();
  add_(dst, src);
  std::vector<double> after = flat.to_vector();
  for (int i = 0; i < 24; ++i) {
    int r = i / 6, c = i % 6;
    bool in = r >= 1 && r < 3 && c % 2 == 0;
    double want = in ? float(BFloat16(float(before[i]) + float(sv[(r - 1) * 3 + c / 2]))) : before[i];
    EXPECT_EQ(after[i], want) << "flat[" << i << "]";
  }
}

TEST(Bf16, InPlaceScale) {
  Tensor g = bf16_values({37}, 7, -3.0, 3.0);
  std::vector<double> before = g.to_vector();
  const double s = 1.0 / 3.0;  // not a bf16 value: scaled in f32, rounded once
  scale_(g, s);
  std::vector<double> after = g.to_vector();
  for (int i = 0; i < 37; ++i) EXPECT_EQ(after[i], float(BFloat16(float(before[i]) * float(s)))) << i;
}

TEST(Bf16, TinyGptForwardBackwardInBf16) {
  nn::GPTConfig cfg{.vocab_size = 11, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16};
  std::shared_ptr<nn::GPT> mb, mf;
  {
    nn::InitContext ctx(/*seed=*/4, Device::cpu(), DType::BF16);
    mb = std::make_shared<nn::GPT>(cfg);
  }
  {
    nn::InitContext ctx(/*seed=*/4, Device::cpu(), DType::F32);
    mf = std::make_shared<nn::GPT>(cfg);
  }
  auto pb = mb->named_parameters(), pf = mf->named_parameters();
  ASSERT_EQ(pb.size(), pf.size());
  {
    NoGradGuard ng;
    // Larger weights than GPT-2's 0.02 so every path matters; the f32 model gets the same
    // (bf16-rounded) values.
    uint64_t s = 100;
    for (size_t i = 0; i < pb.size(); ++i) {
      ASSERT_EQ(pb[i].second.dtype(), DType::BF16) << pb[i].first;
      if (pb[i].first.find("ln") == std::string::npos)
        pb[i].second.copy_(Tensor::randn(pb[i].second.shape(), s++, DType::F32, Device::cpu(), 0, 0.0, 0.2));
      pf[i].second.copy_(pb[i].second);
    }
  }
  Tensor ids = ids_of({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0, 1, 2, 3}, {2, 7});
  Tensor tgt = ids_of({2, 3, 4, 5, 6, 7, 8, 9, 10, 0, 1, 2, 3, 4}, {2, 7});
  mb->zero_grad();
  mf->zero_grad();
  Tensor lb = mb->loss(ids, tgt), lf = mf->loss(ids, tgt);
  EXPECT_EQ(lb.dtype(), DType::F32);  // losses reduce in f32
  EXPECT_EQ(mb->logits(ids).dtype(), DType::BF16);
  lb.backward();
  lf.backward();
  EXPECT_LT(std::abs(lb.item() - lf.item()), 0.02 * std::abs(lf.item()))
      << "bf16 loss " << lb.item() << " vs f32 loss " << lf.item();
  double worst = 0;
  for (size_t i = 0; i < pb.size(); ++i) {
    Tensor g = pb[i].second.grad();
    ASSERT_TRUE(g.defined()) << pb[i].first;
    EXPECT_EQ(g.dtype(), DType::BF16) << pb[i].first;
    for (double v : g.to_vector()) ASSERT_TRUE(std::isfinite(v)) << pb[i].first;
    worst = std::max(worst, rel_l2(g, pf[i].second.grad()));
  }
  // Many bf16 roundings in a row: looser than a single op, still far from noise.
  EXPECT_LT(worst, 0.05);  // measured ~0.011
  RecordProperty("worst_grad_rel_l2", std::to_string(worst));
}

}  // namespace zdl

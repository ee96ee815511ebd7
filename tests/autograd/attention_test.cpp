// causal_attention: gradients against finite differences (f64), forward against a naive
// softmax-and-mask reference written out below, causality, the threaded kernel paths against
// the serial ones, and argument errors.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "kernels/cpu/attention.h"
#include "error_of.h"

namespace zdl {

using testing::expect_gradcheck;
using testing::rand_leaf;
using testing::rand_noncontiguous_leaf;

namespace {

Tensor attention_of(const std::vector<Tensor>& x) { return causal_attention(x[0], x[1], x[2]); }

// Naive reference in double: scores, explicit mask, explicit softmax, weighted sum of values.
// q, k, v [B, NH, T, HS] in any layout; returns the [B, NH, T, HS] output in logical order.
std::vector<double> reference_attention(const Tensor& q, const Tensor& k, const Tensor& v) {
  const int64_t B = q.size(0), NH = q.size(1), T = q.size(2), HS = q.size(3);
  std::vector<double> Q = q.to_vector(), K = k.to_vector(), V = v.to_vector();
  std::vector<double> out(Q.size(), 0.0), s(static_cast<size_t>(T));
  for (int64_t bh = 0; bh < B * NH; ++bh) {
    const int64_t base = bh * T * HS;
    for (int64_t i = 0; i < T; ++i) {
      for (int64_t j = 0; j < T; ++j) {
        double dot = 0.0;
        for (int64_t c = 0; c < HS; ++c) dot += Q[base + i * HS + c] * K[base + j * HS + c];
        const double mask = j > i ? -std::numeric_limits<double>::infinity() : 0.0;
        s[j] = dot / std::sqrt(static_cast<double>(HS)) + mask;
      }
      const double m = *std::max_element(s.begin(), s.end());
      double denom = 0.0;
      for (int64_t j = 0; j < T; ++j) denom += std::exp(s[j] - m);
      for (int64_t j = 0; j < T; ++j) {
        const double p = std::exp(s[j] - m) / denom;
        for (int64_t c = 0; c < HS; ++c) out[base + i * HS + c] += p * V[base + j * HS + c];
      }
    }
  }
  return out;
}

// max|a - r| / max(1, max|r|), as in gradcheck.
double rel_err(const std::vector<double>& a, const std::vector<double>& r) {
  EXPECT_EQ(a.size(), r.size());
  double diff = 0.0, scale = 1.0;
  for (size_t i = 0; i < r.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - r[i]));
    scale = std::max(scale, std::abs(r[i]));
  }
  return diff / scale;
}

// [B, NH, T, HS] view of a [B, T, NH, HS] tensor: the layout attention gets from a QKV projection.
Tensor heads_view(const Shape& bnth, uint64_t seed, DType dtype) {
  Tensor base = Tensor::randn({bnth[0], bnth[2], bnth[1], bnth[3]}, seed, dtype);
  return transpose(base, 1, 2);
}

using ::zdl::testing::error_of;

}  // namespace

TEST(Attention, ForwardMatchesNaiveReference) {
  // T=37 fits one row block; T=150 spans three (kAttentionRowBlock = 64), with a partial last.
  for (int64_t T : {int64_t{37}, int64_t{150}}) {
    Shape shape{2, 3, T, 16};
    Tensor q = heads_view(shape, 1, DType::F32), k = heads_view(shape, 2, DType::F32), v = heads_view(shape, 3, DType::F32);
    ASSERT_FALSE(q.is_contiguous());
    Tensor out = causal_attention(q, k, v);
    EXPECT_EQ(out.shape(), shape);
    EXPECT_EQ(out.dtype(), DType::F32);
    EXPECT_LT(rel_err(out.to_vector(), reference_attention(q, k, v)), 1e-5) << "T=" << T;
  }
}

TEST(Attention, GradcheckOddSizes) {
  expect_gradcheck(attention_of, {rand_leaf({2, 3, 7, 5}, 1), rand_leaf({2, 3, 7, 5}, 2), rand_leaf({2, 3, 7, 5}, 3)});
  expect_gradcheck(attention_of, {rand_leaf({2, 3, 1, 5}, 4), rand_leaf({2, 3, 1, 5}, 5), rand_leaf({2, 3, 1, 5}, 6)});
}

TEST(Attention, GradcheckNonContiguousInputs) {
  // Transposed leaves ...
  expect_gradcheck(attention_of, {rand_noncontiguous_leaf({2, 3, 7, 5}, 7), rand_noncontiguous_leaf({2, 3, 7, 5}, 8),
                                  rand_noncontiguous_leaf({2, 3, 7, 5}, 9)});
  // ... and the real thing: q, k, v sliced out of one fused [B, T, 3*NH*HS] projection, split
  // into heads and transposed to [B, NH, T, HS].
  const int64_t B = 2, T = 7, NH = 3, HS = 5, C = NH * HS;
  auto from_fused = [=](const std::vector<Tensor>& x) {
    auto heads = [&](int64_t i) { return transpose(reshape(slice(x[0], 2, i * C, (i + 1) * C), {B, T, NH, HS}), 1, 2); };
    return causal_attention(heads(0), heads(1), heads(2));
  };
  expect_gradcheck(from_fused, {rand_leaf({B, T, 3 * C}, 10)});
}

TEST(Attention, GradcheckAcrossRowBlocks) {
  const int64_t T = 2 * kernels::cpu::kAttentionRowBlock + 3;
  expect_gradcheck(attention_of, {rand_leaf({1, 1, T, 3}, 11), rand_leaf({1, 1, T, 3}, 12), rand_leaf({1, 1, T, 3}, 13)});
}

TEST(Attention, OutputAtTimeTIgnoresLaterInputs) {
  const int64_t B = 2, NH = 3, T = 23, HS = 4, t0 = 9;
  Shape shape{B, NH, T, HS};
  std::vector<Tensor> x, y;  // y: x with every time step after t0 replaced
  for (uint64_t i = 0; i < 3; ++i) {
    std::vector<double> vals = Tensor::randn(shape, 20 + i, DType::F64).to_vector();
    x.push_back(Tensor::from_vector(vals, shape, DType::F64).set_requires_grad(true));
    for (int64_t bh = 0; bh < B * NH; ++bh)
      for (int64_t t = t0 + 1; t < T; ++t)
        for (int64_t c = 0; c < HS; ++c) vals[(bh * T + t) * HS + c] = 10.0 * std::sin(static_cast<double>(t * 7 + c));
    y.push_back(Tensor::from_vector(vals, shape, DType::F64));
  }
  Tensor ox = causal_attention(x[0], x[1], x[2]);
  Tensor oy = causal_attention(y[0], y[1], y[2]);
  // Masked scores get probability exactly 0, so the visible prefix is bit-identical.
  EXPECT_EQ(slice(ox, 2, 0, t0 + 1).to_vector(), slice(oy, 2, 0, t0 + 1).to_vector());
  EXPECT_NE(slice(ox, 2, t0 + 1, T).to_vector(), slice(oy, 2, t0 + 1, T).to_vector());

  // Same in backward: a loss on outputs up to t0 sends no gradient to later q, k, v.
  sum(slice(ox, 2, 0, t0 + 1)).backward();
  for (const Tensor& xi : x) {
    for (double g : slice(xi.grad(), 2, t0 + 1, T).to_vector()) ASSERT_EQ(g, 0.0);
    double early = 0.0;
    for (double g : slice(xi.grad(), 2, 0, t0 + 1).to_vector()) early += std::abs(g);
    EXPECT_GT(early, 0.0);
  }
}

TEST(Attention, ThreadedKernelsMatchSerial) {
  // Runs the kernels directly with forced thread counts, so the multi-thread paths (query
  // blocks of one head on several threads; backward split into chunks whose dK/dV partials are
  // summed) are exercised whatever the machine, against the single-thread path.
  namespace kc = kernels::cpu;
  const int64_t T = 3 * kc::kAttentionRowBlock + 17, HS = 8;
  for (int64_t bnh : {int64_t{1}, int64_t{2}, int64_t{5}}) {
    const int64_t n = bnh * T * HS;
    auto rnd = [&](uint64_t seed) { return Tensor::randn({n}, seed, DType::F64).to_vector(); };
    std::vector<double> q = rnd(1), k = rnd(2), v = rnd(3), dout = rnd(4);
    struct Result {
      std::vector<double> out, lse, dq, dk, dv;
    };
    auto run = [&](int threads) {
      Result r{std::vector<double>(n), std::vector<double>(bnh * T), std::vector<double>(n), std::vector<double>(n),
               std::vector<double>(n)};
      std::vector<double> work(kc::attention_forward_workspace<double>(bnh, T, HS, threads));
      kc::causal_attention_forward<double>(bnh, T, HS, q.data(), k.data(), v.data(), r.out.data(), r.lse.data(), threads,
                                           work.data());
      work.assign(kc::attention_backward_workspace<double>(bnh, T, HS, threads), 0.0);
      kc::causal_attention_backward<double>(bnh, T, HS, q.data(), k.data(), v.data(), r.out.data(), r.lse.data(),
                                            dout.data(), r.dq.data(), r.dk.data(), r.dv.data(), threads, work.data());
      return r;
    };
    const int max_threads = omp_get_max_threads();
    Result serial = run(1);
    for (int threads : {2, 3, 4}) {
      Result par = run(threads);
      EXPECT_EQ(par.out, serial.out) << "bnh=" << bnh << " threads=" << threads;  // same arithmetic per row
      EXPECT_EQ(par.lse, serial.lse);
      EXPECT_LT(rel_err(par.dq, serial.dq), 1e-12) << "bnh=" << bnh << " threads=" << threads;
      EXPECT_LT(rel_err(par.dk, serial.dk), 1e-12) << "bnh=" << bnh << " threads=" << threads;
      EXPECT_LT(rel_err(par.dv, serial.dv), 1e-12) << "bnh=" << bnh << " threads=" << threads;
    }
    // The kernels pin Eigen to one thread inside their region only; the caller's setting stays.
    EXPECT_EQ(omp_get_max_threads(), max_threads);
  }
}

TEST(Attention, NoGradModeBuildsNoGraph) {
  Tensor q = rand_leaf({1, 2, 5, 4}, 1), k = rand_leaf({1, 2, 5, 4}, 2), v = rand_leaf({1, 2, 5, 4}, 3);
  NoGradGuard ng;
  Tensor out = causal_attention(q, k, v);
  EXPECT_FALSE(out.requires_grad());
  EXPECT_LT(rel_err(out.to_vector(), reference_attention(q, k, v)), 1e-12);
}

TEST(Attention, RejectsBadArguments) {
  Tensor q = Tensor::randn({2, 3, 7, 5}, 1), k = Tensor::randn({2, 3, 6, 5}, 2), v = Tensor::randn({2, 3, 7, 5}, 3);
  std::string msg = error_of([&] { causal_attention(q, k, v); });
  EXPECT_NE(msg.find("[2,3,7,5]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2,3,6,5]"), std::string::npos) << msg;
  msg = error_of([&] { causal_attention(q, q, Tensor::randn({2, 3, 7, 4}, 4)); });
  EXPECT_NE(msg.find("[2,3,7,4]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2,3,7,5]"), std::string::npos) << msg;

  Tensor q3 = Tensor::randn({3, 7, 5}, 5);
  msg = error_of([&] { causal_attention(q3, q3, q3); });
  EXPECT_NE(msg.find("4-D"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[3,7,5]"), std::string::npos) << msg;

  msg = error_of([&] { causal_attention(q, q, v.to(DType::F64)); });
  EXPECT_NE(msg.find("causal_attention"), std::string::npos) << msg;
  EXPECT_FALSE(msg.empty());
}

}  // namespace zdl

// matmul and linear: gradients against finite differences (f64), forward against a plain
// triple loop (f32), transposed layouts read in place, and shape/dtype errors that show both
// sides.
#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gradcheck.h"
#include "kernels/cpu/matmul.h"

namespace zdl {

using testing::expect_gradcheck;
using testing::rand_leaf;
using testing::rand_noncontiguous_leaf;

namespace {

Tensor mm(const std::vector<Tensor>& x) { return matmul(x[0], x[1]); }

// c[m, n] = sum_k a[m, k] b[k, n] over any layout, in double: the independent oracle.
std::vector<double> naive_matmul(const Tensor& a, const Tensor& b) {
  std::vector<double> av = a.to_vector(), bv = b.to_vector();
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  std::vector<double> c(static_cast<size_t>(M * N), 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0.0;
      for (int64_t k = 0; k < K; ++k) acc += av[m * K + k] * bv[k * N + n];
      c[m * N + n] = acc;
    }
  return c;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], tol) << "element " << i;
}

// Runs f, expects a zdl::Error whose message contains every needle.
template <class F>
void expect_error_mentions(F f, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "expected a zdl::Error";
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  }
}

}  // namespace

TEST(Matmul, GradientsTwoD) { expect_gradcheck(mm, {rand_leaf({3, 5}, 1), rand_leaf({5, 7}, 2)}); }

TEST(Matmul, GradientsBatchedWithSharedB) {
  expect_gradcheck(mm, {rand_leaf({2, 3, 5}, 3), rand_leaf({5, 4}, 4)});
  expect_gradcheck(mm, {rand_leaf({2, 3, 3, 5}, 5), rand_leaf({5, 4}, 6)});
}

TEST(Matmul, GradientsBatchedWithSameLeadingDims) {
  expect_gradcheck(mm, {rand_leaf({2, 3, 5}, 7), rand_leaf({2, 5, 4}, 8)});
  expect_gradcheck(mm, {rand_leaf({2, 3, 4, 5}, 9), rand_leaf({2, 3, 5, 6}, 10)});
}

TEST(Matmul, GradientsNonContiguousInputs) {
  // Transposed layouts map onto the kernels' transpose flags (no copy).
  expect_gradcheck(mm, {rand_noncontiguous_leaf({3, 5}, 11), rand_noncontiguous_leaf({5, 7}, 12)});
  expect_gradcheck(mm, {rand_noncontiguous_leaf({2, 3, 5}, 13), rand_noncontiguous_leaf({2, 5, 4}, 14)});
  // Batched a with transposed matrices and a shared b: a cannot fold into rows, so it is copied.
  expect_gradcheck(mm, {rand_noncontiguous_leaf({2, 3, 5}, 15), rand_noncontiguous_leaf({5, 4}, 16)});
}

TEST(Matmul, GradientsThroughViewsOfOutput) {
  // A permuted (non-contiguous) gradient arrives at matmul's backward.
  expect_gradcheck([](const std::vector<Tensor>& x) { return transpose(matmul(x[0], x[1]), 0, 2); },
                   {rand_leaf({2, 3, 5}, 17), rand_leaf({2, 5, 4}, 18)});
  // Attention-shaped: q [B,NH,T,HS] @ k^T.
  expect_gradcheck([](const std::vector<Tensor>& x) { return matmul(x[0], transpose(x[1], -1, -2)); },
                   {rand_leaf({2, 2, 3, 4}, 19), rand_leaf({2, 2, 3, 4}, 20)});
}

TEST(Matmul, ForwardMatchesTripleLoopF32) {
  Tensor a = Tensor::randn({37, 53}, 21), b = Tensor::randn({53, 29}, 22);
  expect_close(matmul(a, b).to_vector(), naive_matmul(a, b), 1e-4);
  // Same values through transposed views.
  Tensor at = transpose(contiguous(transpose(a, 0, 1)), 0, 1), bt = transpose(contiguous(transpose(b, 0, 1)), 0, 1);
  ASSERT_FALSE(at.is_contiguous());
  expect_close(matmul(at, bt).to_vector(), naive_matmul(a, b), 1e-4);
}

TEST(Matmul, LargeAndBatchedProductsMatchReference) {
  // Big enough to be tiled (the tiles run on all threads; that the bits do not depend on the
  // thread count is tests/kernels/exactness_test.cpp's); batched with many small matrices too.
  Tensor a = Tensor::randn({4, 130, 70}, 23), b = Tensor::randn({4, 70, 90}, 24);
  Tensor c = matmul(a, b);
  std::vector<double> got = c.to_vector();
  for (int64_t i = 0; i < 4; ++i) {
    Tensor ai = reshape(slice(a, 0, i, i + 1), {130, 70}), bi = reshape(slice(b, 0, i, i + 1), {70, 90});
    std::vector<double> want = naive_matmul(ai, bi);
    std::vector<double> part(got.begin() + i * 130 * 90, got.begin() + (i + 1) * 130 * 90);
    expect_close(part, want, 1e-3);
  }
  Tensor s = Tensor::randn({64, 5, 6}, 25), t = Tensor::randn({64, 6, 3}, 26);
  std::vector<double> got_small = matmul(s, t).to_vector();
  std::vector<double> want0 = naive_matmul(reshape(slice(s, 0, 63, 64), {5, 6}), reshape(slice(t, 0, 63, 64), {6, 3}));
  expect_close(std::vector<double>(got_small.end() - 15, got_small.end()), want0, 1e-4);
}

TEST(Matmul, KernelTransposeFlagsMatchReference) {
  // Every (trans_a, trans_b, accumulate) combination of the Eigen kernel against its plain twin,
  // with leading dimensions larger than the rows.
  const int64_t M = 7, N = 5, K = 6, ld = 9;
  std::vector<double> a(static_cast<size_t>(ld * 9)), b(a.size()), c0(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = std::sin(0.3 * i);
    b[i] = std::cos(0.7 * i);
    c0[i] = 0.01 * i;
  }
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool acc : {false, true}) {
        std::vector<double> c = c0, r = c0;
        kernels::cpu::gemm<double>(M, N, K, ta, a.data(), ld, tb, b.data(), ld, c.data(), ld, acc);
        kernels::cpu::gemm_reference<double>(M, N, K, ta, a.data(), ld, tb, b.data(), ld, r.data(), ld, acc);
        expect_close(c, r, 1e-12);
      }
}

TEST(Matmul, F32BackendsMatchReference) {
  // Each f32 back end this build and CPU have (Eigen; zerodl's kernel, AVX2 and AVX-512;
  // oneDNN's sgemm where found) against the plain twin: every transpose and accumulate combination, leading
  // dimensions beyond the rows, one product small enough to run untiled, one that is tiled, and
  // one past zerodl's kernel's cache blocks in K and N with partial register blocks. Without
  // accumulate, C's old contents (NaN here) must not leak into the result.
  const kernels::cpu::GemmBackend saved = kernels::cpu::gemm_backend();
  int tested = 0;
  for (auto backend : {kernels::cpu::GemmBackend::Eigen, kernels::cpu::GemmBackend::Avx2,
                       kernels::cpu::GemmBackend::Avx512, kernels::cpu::GemmBackend::OneDnn}) {
    if (!kernels::cpu::gemm_backend_available(backend)) continue;
    kernels::cpu::set_gemm_backend(backend);
    ++tested;
    for (auto [M, N, K] : {std::array<int64_t, 3>{7, 5, 6}, std::array<int64_t, 3>{300, 200, 150},
                           std::array<int64_t, 3>{13, 2100, 801}}) {
      const int64_t ld = std::max({M, N, K}) + 3;
      std::vector<float> a(static_cast<size_t>(ld * ld)), b(a.size()), c0(a.size());
      for (size_t i = 0; i < a.size(); ++i) {
        a[i] = static_cast<float>(std::sin(0.3 * i));
        b[i] = static_cast<float>(std::cos(0.7 * i));
        c0[i] = static_cast<float>(0.01 * (i % 100));
      }
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (bool acc : {false, true}) {
            std::vector<float> c = c0, r = c0;
            if (!acc) std::fill(c.begin(), c.end(), std::nanf(""));
            kernels::cpu::gemm<float>(M, N, K, ta, a.data(), ld, tb, b.data(), ld, c.data(), ld, acc);
            kernels::cpu::gemm_reference<float>(M, N, K, ta, a.data(), ld, tb, b.data(), ld, r.data(), ld, acc);
            for (int64_t m = 0; m < M; ++m)
              for (int64_t n = 0; n < N; ++n)
                ASSERT_NEAR(c[m * ld + n], r[m * ld + n], 1e-5 * K)
                    << kernels::cpu::gemm_backend_name(backend) << " M=" << M << " N=" << N << " K=" << K
                    << " ta=" << ta << " tb=" << tb << " acc=" << acc << " at (" << m << ", " << n << ")";
          }
    }
  }
  kernels::cpu::set_gemm_backend(saved);
  EXPECT_GE(tested, 1);
}

TEST(Matmul, EmptyInnerDimensionGivesZeros) {
  Tensor c = matmul(Tensor::ones({3, 0}), Tensor::ones({0, 4}));
  EXPECT_EQ(c.shape(), (Shape{3, 4}));
  for (double v : c.to_vector()) EXPECT_EQ(v, 0.0);
}

TEST(Linear, GradientsWithBias) {
  expect_gradcheck([](const std::vector<Tensor>& x) { return linear(x[0], x[1], x[2]); },
                   {rand_leaf({2, 3, 5}, 31), rand_leaf({4, 5}, 32), rand_leaf({4}, 33)});
}

TEST(Linear, GradientsWithoutBias) {
  expect_gradcheck([](const std::vector<Tensor>& x) { return linear(x[0], x[1], Tensor()); },
                   {rand_leaf({2, 3, 5}, 34), rand_leaf({4, 5}, 35)});
}

TEST(Linear, GradientsNonContiguousAndOneD) {
  expect_gradcheck([](const std::vector<Tensor>& x) { return linear(x[0], x[1], x[2]); },
                   {rand_noncontiguous_leaf({2, 3, 5}, 36), rand_noncontiguous_leaf({4, 5}, 37), rand_leaf({4}, 38)});
  expect_gradcheck([](const std::vector<Tensor>& x) { return linear(x[0], x[1], x[2]); },
                   {rand_leaf({5}, 39), rand_leaf({4, 5}, 40), rand_leaf({4}, 41)});
}

TEST(Linear, MatchesMatmulPlusBias) {
  Tensor x = Tensor::randn({6, 11}, 42), w = Tensor::randn({3, 11}, 43), b = Tensor::randn({3}, 44);
  expect_close(linear(x, w, b).to_vector(), add(matmul(x, transpose(w, 0, 1)), b).to_vector(), 1e-5);
}

// gelu_mlp on the CPU is linear, gelu, linear (the GPU fuses it: tests/cuda): its gradients
// check, and a bad shape gets linear's message.
TEST(Linear, GeluMlpGradientsAndErrors) {
  expect_gradcheck([](const std::vector<Tensor>& x) { return gelu_mlp(x[0], x[1], x[2], x[3], x[4]); },
                   {rand_leaf({2, 3, 5}, 45), rand_leaf({8, 5}, 46), rand_leaf({8}, 47), rand_leaf({5, 8}, 48),
                    rand_leaf({5}, 49)});
  expect_error_mentions([] { gelu_mlp(Tensor::ones({4, 6}), Tensor::ones({8, 5}), Tensor::ones({8}), Tensor::ones({6, 8}),
                                      Tensor::ones({6})); },
                        {"[4,6]", "[8,5]"});
}

TEST(Matmul, ShapeErrorsShowBothShapes) {
  const auto npos = std::string::npos;
  try {
    matmul(Tensor::ones({3, 5}), Tensor::ones({4, 7}));
    ADD_FAILURE() << "expected a zdl::Error";
  } catch (const zdl::Error& e) {
    EXPECT_NE(std::string(e.what()).find("[3,5]"), npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[4,7]"), npos) << e.what();
  }
  expect_error_mentions([] { matmul(Tensor::ones({2, 3, 5}), Tensor::ones({3, 5, 4})); }, {"[2,3,5]", "[3,5,4]"});
  expect_error_mentions([] { matmul(Tensor::ones({3, 5}), Tensor::ones({2, 5, 4})); }, {"[3,5]", "[2,5,4]"});
  expect_error_mentions([] { matmul(Tensor::ones({5}), Tensor::ones({5, 4})); }, {"[5]", "[5,4]"});
  expect_error_mentions([] { linear(Tensor::ones({4, 64, 512}), Tensor::ones({3, 768}), Tensor()); },
                        {"768", "512", "[4,64,512]", "[3,768]"});
  expect_error_mentions([] { linear(Tensor::ones({2, 5}), Tensor::ones({3, 5}), Tensor::ones({4})); },
                        {"[4]", "[3,5]"});
}

TEST(Matmul, DtypeMismatchIsAnError) {
  expect_error_mentions([] { matmul(Tensor::ones({3, 5}), Tensor::ones({5, 2}, DType::F64)); }, {"f32", "f64"});
  expect_error_mentions([] { linear(Tensor::ones({3, 5}), Tensor::ones({2, 5}), Tensor::ones({2}, DType::F64)); },
                        {"f32", "f64"});
}

}  // namespace zdl

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>

#include "autograd/ops.h"
#include "core/tensor.h"
#include "error_of.h"

namespace zdl {

using ::zdl::testing::error_of;

TEST(Tensor, FactoriesAndViews) {
  Tensor t = Tensor::from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_TRUE(t.is_contiguous());
  Tensor tt = transpose(t, 0, 1);
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_EQ(tt.to_vector(), (std::vector<double>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(tt.storage(), t.storage());
}

// A 0-d tensor has no dimension 0: size(0), transpose, squeeze, slice, split, cat read past its
// empty shape (a segfault). Reductions over dimension 0 (or -1) of it are the scalar, as in PyTorch.
TEST(Tensor, A0dTensorHasNoDimensionsToName) {
  Tensor s = Tensor::scalar(3.0);
  const std::string says = "dimension 0 out of range for a 0-d tensor";
  EXPECT_NE(error_of([&] { s.size(0); }).find(says), std::string::npos);
  EXPECT_NE(error_of([&] { transpose(s, 0, 0); }).find(says), std::string::npos);
  EXPECT_NE(error_of([&] { squeeze(s, 0); }).find(says), std::string::npos);
  EXPECT_NE(error_of([&] { slice(s, 0, 0, 1); }).find(says), std::string::npos);
  EXPECT_NE(error_of([&] { cat({s, s}, 0); }).find(says), std::string::npos);
  EXPECT_EQ(sum(s, {0}).item(), 3.0);
  EXPECT_EQ(mean(s, {-1}).item(), 3.0);
  EXPECT_NE(error_of([&] { mean(s, {1}); }).find("dimension 1 out of range for a 0-d tensor"), std::string::npos);
}

// Element and byte counts past 64 bits are refused: 1<<62 floats wrapped to a 0-byte storage
// (fill_ then wrote past it), [1<<62, 3] counted a negative number of elements.
TEST(Tensor, CountsPast64BitsAreRefused) {
  const int64_t big = int64_t{1} << 62;
  EXPECT_NE(error_of([&] { Tensor::empty({big}); }).find("has more bytes than 64 bits count"), std::string::npos);
  EXPECT_NE(error_of([&] { Tensor::zeros({big, 3}); }).find("has more elements than 64 bits count"), std::string::npos);
  EXPECT_NE(error_of([&] { Tensor::empty({int64_t{1} << 32, int64_t{1} << 32}); }).find("more elements than 64 bits"),
            std::string::npos);
  EXPECT_NE(error_of([&] { sum(expand(Tensor::ones({1, 1}), {int64_t{1} << 32, int64_t{1} << 32})); })
                .find("more elements than 64 bits"),
            std::string::npos);
}

// Factories and views take only what they can hold: NaN or 1e30 into an integer tensor was an
// undefined conversion (INT64_MIN), randn into integers rounded normal draws, rand with low > high
// drew from the reversed range, and from_storage's offset -1 or a stride of 2^62 (wrapping round)
// read outside the buffer.
TEST(Tensor, FactoriesAndViewsRefuseWhatTheyCannotHold) {
  EXPECT_NE(error_of([] { Tensor::from_vector(std::vector<double>{1e30}, {1}, DType::I64); }).find("does not fit in i64"),
            std::string::npos);
  EXPECT_NE(error_of([] { Tensor::full({2}, std::nan(""), DType::I32); }).find("does not fit in i32"), std::string::npos);
  EXPECT_NE(error_of([] { Tensor::full({2}, 3e9, DType::I32); }).find("does not fit in i32"), std::string::npos);
  EXPECT_EQ(Tensor::full({1}, -2147483648.0, DType::I32).item(), -2147483648.0);
  EXPECT_NE(error_of([] { Tensor::randn({2}, 1, DType::I64); }).find("need a floating dtype"), std::string::npos);
  EXPECT_NE(error_of([] { Tensor::rand({2}, 1, DType::F32, Device::cpu(), 0, 1.0, 0.0); }).find("low <= high"),
            std::string::npos);
  Tensor buf = Tensor::zeros({4});
  EXPECT_NE(error_of([&] { Tensor::from_storage(buf.storage(), {2}, {1}, -1, DType::F32); }).find("negative offset"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Tensor::from_storage(buf.storage(), {3}, {int64_t{1} << 62}, 0, DType::F32); })
                .find("past 64 bits"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Tensor::from_storage(buf.storage(), {2}, {2}, 2, DType::F32); }).find("exceeds storage"),
            std::string::npos);
  EXPECT_EQ(Tensor::from_storage(buf.storage(), {2}, {2}, 1, DType::F32).numel(), 2);
}

// An expanded view names one element several times: add_ into it added 4 times into that element.
// A printout shows the first values in the tensor's own (logical) order; none for a count <= 0
// (it printed "values=[, ...]").
TEST(Tensor, PrintingShowsTheFirstValues) {
  Tensor t = Tensor::from_vector(std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {2, 5}, DType::F32);
  EXPECT_NE(t.to_string().find("values=[1, 2, 3, 4, 5, 6, 7, 8, ...])"), std::string::npos) << t.to_string();
  EXPECT_NE(t.to_string(0).find("values=[...])"), std::string::npos) << t.to_string(0);
  EXPECT_NE(t.to_string(-1).find("values=[...])"), std::string::npos) << t.to_string(-1);
  EXPECT_NE(t.to_string(10).find("values=[1, 2, 3, 4, 5, 6, 7, 8, 9, 10])"), std::string::npos);
  EXPECT_NE(transpose(t, 0, 1).to_string(3).find("values=[1, 6, 2, ...])"), std::string::npos);
  EXPECT_NE(slice(t, 1, 2, 4).to_string().find("values=[3, 4, 8, 9])"), std::string::npos);
  EXPECT_NE(Tensor::zeros({0}).to_string().find("values=[])"), std::string::npos);
}

TEST(Tensor, AddIntoAnExpandedViewIsRefused) {
  Tensor base = Tensor::zeros({1, 3});
  Tensor wide = expand(base, {4, 3});
  EXPECT_NE(error_of([&] { add_(wide, Tensor::ones({4, 3})); }).find("repeats elements (an expanded view)"),
            std::string::npos);
  // copy_ too: it kept the last row's values silently.
  EXPECT_NE(error_of([&] { wide.copy_(Tensor::randn({4, 3}, 1)); }).find("copy_: the destination of shape=[4,3]"),
            std::string::npos);
  expand(base, {1, 3}).copy_(Tensor::zeros({1, 3}));  // size 1 along the stride 0: one element each
  EXPECT_EQ(base.to_vector(), (std::vector<double>{0, 0, 0}));
  add_(base, Tensor::ones({1, 3}));
  EXPECT_EQ(base.to_vector(), (std::vector<double>{1, 1, 1}));
  // A negative size is named by expand (it was "Tensor::empty: negative size").
  EXPECT_NE(error_of([&] { expand(base, {-1, 3}); }).find("expand: negative size in [-1,3]"), std::string::npos);
}

// Copies, casts and fills of a long flat buffer split its one row across threads; a strided
// view with few long rows too. Every element must come out as the one-element conversion does.
TEST(Tensor, LargeCopiesCastsAndFillsMatchElementByElementOnAnyThreadCount) {
  const int64_t n = (1 << 17) + 37;  // over the parallel grain, not a multiple of the thread count
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = std::ldexp(1.0f + 0.37f * static_cast<float>(i % 997), -static_cast<int>(i % 23)) *
                                ((i & 1) ? -1.0f : 1.0f);
  Tensor f = Tensor::empty({n}, DType::F32);
  std::memcpy(f.raw_data(), v.data(), v.size() * sizeof(float));
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    Tensor b = Tensor::empty({n}, DType::BF16);
    b.copy_(f);
    const auto* bp = static_cast<const BFloat16*>(b.raw_data());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(bp[i].bits, BFloat16(v[static_cast<size_t>(i)]).bits) << i << " threads " << threads;
    Tensor back = Tensor::empty({n}, DType::F32);
    back.copy_(b);
    Tensor same = Tensor::empty({n}, DType::BF16);
    same.copy_(b);
    EXPECT_EQ(std::memcmp(same.raw_data(), b.raw_data(), b.nbytes()), 0) << threads;
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(static_cast<const float*>(back.raw_data())[i], static_cast<float>(bp[i])) << i;
    // Two long rows, every other column: the strided path, split by rows and by elements.
    Tensor cols = Tensor::empty({2, n}, DType::F32);
    cols.fill_(-1.5);
    Tensor odd_columns = Tensor::from_storage(cols.storage(), {2, n / 2}, {n, 2}, 1, DType::F32);
    odd_columns.copy_(Tensor::from_storage(f.storage(), {2, n / 2}, {n / 2, 1}, 0, DType::F32));
    const float* cp = static_cast<const float*>(cols.raw_data());
    for (int64_t r = 0; r < 2; ++r)
      for (int64_t j = 0; j < n / 2; ++j) {
        ASSERT_EQ(cp[r * n + 2 * j], -1.5f) << r << "," << j;
        ASSERT_EQ(cp[r * n + 2 * j + 1], v[static_cast<size_t>(r * (n / 2) + j)]) << r << "," << j;
      }
    ASSERT_EQ(cp[n - 1], -1.5f);  // n is odd: the last column of row 0 is not in the view
    Tensor z = Tensor::empty({n}, DType::BF16);
    z.fill_(3.0);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(static_cast<const BFloat16*>(z.raw_data())[i].bits, BFloat16(3.0f).bits);
  }
  omp_set_num_threads(saved);
}

}  // namespace zdl

// CUDA views and tensor plumbing: view ops (reshape, transpose, permute, slice with steps,
// expand, squeeze/unsqueeze, split, cat, contiguous) forward and backward against the CPU ops
// (f32 relative 1e-5, bf16 1e-2; layout ops are exact, so most compare bit for bit), and
// Tensor::copy_ / to / fill_ / zeros / item / to_vector between any strided CPU and CUDA views in
// every dtype pair, checked against the CPU's own copy; uploads queued without a wait and values
// read later; the 64-bit index path of the strided kernels. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "core/deferred_read.h"
#include "core/device_copy.h"
#include "cuda_compare.h"

namespace zdl {

using namespace cuda_test;
using TL = std::vector<Tensor>;

namespace {

const DType kAllDtypes[] = {DType::F32, DType::F64, DType::BF16, DType::F16, DType::I32, DType::I64};

// Layout ops move values without arithmetic: outputs and gradients must be bit-equal to the CPU's
// unless the graph sums (expand, a view used twice), where they agree to the tolerance.
void compare(const OpFn& f, const TL& inputs, DType dt, const std::string& what, bool exact) {
  OpRun cpu = run_op(f, inputs, Device::cpu()), gpu = run_op(f, inputs, Device::cuda());
  if (exact) expect_bit_equal(gpu, cpu, what + " " + dtype_name(dt));
  else expect_close(gpu, cpu, tolerance(dt), what + " " + dtype_name(dt));
}

// Values that survive every dtype (small integers and halves), as dtype on the CPU.
Tensor exact_values(const Shape& shape, uint64_t seed, DType dt) {
  Tensor r = Tensor::rand(shape, seed, DType::F64, Device::cpu(), 0, -50, 50);
  std::vector<double> v = r.to_vector();
  for (double& x : v) x = std::round(x * 2) / 2;
  if (dt == DType::I32 || dt == DType::I64)
    for (double& x : v) x = std::round(x);
  return Tensor::from_vector(v, shape, dt);
}

}  // namespace

TEST(CudaViews, ViewOpsForwardAndBackward) {
  ZDL_REQUIRE_GPU();
  for (DType dt : kDtypes) {
    Tensor x = Tensor::randn({3, 5, 7}, 1, dt), y = Tensor::randn({7, 5, 3}, 2, dt);
    compare([](const TL& t) { return mul(reshape(t[0], {5, -1}), 2.0); }, {x}, dt, "reshape", true);
    compare([](const TL& t) { return mul(transpose(t[0], 0, 2), t[1]); }, {x, y}, dt, "transpose", true);
    compare([](const TL& t) { return contiguous(permute(t[0], {2, 0, 1})); }, {x}, dt, "permute+contiguous", true);
    compare([](const TL& t) { return reshape(transpose(t[0], 1, 2), {-1}); }, {x}, dt, "reshape of a transpose", true);
    compare([](const TL& t) { return squeeze(unsqueeze(mul(t[0], -1.0), 1), 1); }, {x}, dt, "squeeze/unsqueeze", true);
    compare([](const TL& t) { return view(t[0], {15, 7}); }, {x}, dt, "view", true);
    compare([](const TL& t) { return mul(slice(t[0], 1, 1, 5, 2), 3.0); }, {x}, dt, "slice step 2", true);
    compare([](const TL& t) { return contiguous(slice(t[0], -1, -5, 7, 3)); }, {x}, dt, "slice negative start", true);
    // expand's backward sums over the broadcast dims; a view used twice sums in the engine
    Tensor col = Tensor::randn({3, 1}, 3, dt);
    compare([](const TL& t) { return contiguous(expand(t[0], {4, 3, 129})); }, {col}, dt, "expand", false);
    compare([](const TL& t) { return mul(slice(t[0], 2, 0, 4), slice(t[0], 2, 3, 7)); }, {x}, dt, "overlapping slices",
            false);
  }
}

TEST(CudaViews, SplitAndCat) {
  ZDL_REQUIRE_GPU();
  for (DType dt : kDtypes) {
    Tensor a = Tensor::randn({3, 7}, 1, dt), b = Tensor::randn({4, 3}, 2, dt), c = Tensor::randn({129, 33}, 3, dt);
    compare(
        [](const TL& t) {
          auto parts = split(t[0], {2, 3, 2}, 1);
          return cat({mul(parts[2], 2.0), square(parts[1])}, 1);
        },
        {a}, dt, "split+cat", false);
    compare([](const TL& t) { return cat({transpose(t[0], 0, 1), t[1], transpose(t[0], 0, 1)}, 0); }, {a, b}, dt,
            "cat of transposed parts (one used twice)", false);
    compare([](const TL& t) { return cat({t[0], slice(t[0], 1, 0, 33, 4), t[0]}, 1); }, {c}, dt, "cat dim 1", false);
    compare([](const TL& t) { return cat(split(t[0], 40, 0), 0); }, {c}, dt, "cat(split)", true);
  }
}

TEST(CudaViews, CatErrorsMatchCpu) {
  ZDL_REQUIRE_GPU();
  Tensor a = Tensor::zeros({3, 4}), b = Tensor::zeros({3, 5});
  auto g = [](const Tensor& t) { return t.to(Device::cuda()); };
  EXPECT_EQ(error_text([&] { cat({g(a), g(b)}, 0); }), error_text([&] { cat({a, b}, 0); }));
  EXPECT_EQ(error_text([&] { slice(g(a), 1, 3, 2); }), error_text([&] { slice(a, 1, 3, 2); }));
  EXPECT_EQ(error_text([&] { view(transpose(g(a), 0, 1), {12}); }), error_text([&] { view(transpose(a, 0, 1), {12}); }));
  std::string msg = error_text([&] { cat({a, g(a)}, 0); });
  EXPECT_NE(msg.find("cpu"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cuda:0"), std::string::npos) << msg;
}

TEST(CudaTensor, CopyBetweenStridedViewsOfAnyDevicesAndDtypes) {
  ZDL_REQUIRE_GPU();
  // For every dtype pair and every direction, copying a transposed/sliced source into a strided
  // destination view must give exactly what the CPU's copy gives.
  for (DType from : kAllDtypes)
    for (DType to : kAllDtypes) {
      Tensor src_cpu = exact_values({9, 14}, 1, from);
      Tensor src_view = slice(transpose(src_cpu, 0, 1), 0, 1, 14, 2);  // [7, 9], strides (2, 14)
      Tensor want_base = Tensor::zeros({9, 16}, to);
      Tensor want_view = slice(transpose(want_base, 0, 1), 0, 2, 16, 2);  // [7, 9]
      want_view.copy_(src_view);
      std::string what = std::string(dtype_name(from)) + " -> " + dtype_name(to);
      for (Device sdev : {Device::cpu(), Device::cuda()})
        for (Device ddev : {Device::cpu(), Device::cuda()}) {
          Tensor src = slice(transpose(src_cpu.to(sdev), 0, 1), 0, 1, 14, 2);
          Tensor base = Tensor::zeros({9, 16}, to, ddev);
          slice(transpose(base, 0, 1), 0, 2, 16, 2).copy_(src);
          EXPECT_TRUE(bytes_of(base) == bytes_of(want_base)) << what << " " << sdev << " -> " << ddev;
        }
      // contiguous destinations and whole-tensor to()
      Tensor got = src_cpu.to(Device::cuda()).to(to).to(Device::cpu());
      EXPECT_TRUE(bytes_of(got) == bytes_of(src_cpu.to(to))) << what << " via to()";
    }
}

TEST(CudaTensor, Bf16ConversionsRoundLikeTheCpu) {
  ZDL_REQUIRE_GPU();
  // Ties, subnormals, infinities and NaN: f32 -> bf16/f16 on the device gives the CPU's bits.
  std::vector<double> v = {0.0, -0.0, 1.0, 1.00390625, 1.01171875, 1e-40, -1e-42, 3.4e38, -3.4e38, 65504.0, 65520.0,
                           1e-8, 6e-8, INFINITY, -INFINITY, NAN, 0.1, -2.5e-5};
  Tensor f = Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, DType::F32);
  for (DType to : {DType::BF16, DType::F16}) {
    Tensor gpu = Tensor::empty(f.shape(), to, Device::cuda());
    gpu.copy_(f.to(Device::cuda()));  // converted on the device
    EXPECT_TRUE(bytes_of(gpu) == bytes_of(f.to(to))) << dtype_name(to);
  }
}

TEST(CudaTensor, FillZerosItemAndToVector) {
  ZDL_REQUIRE_GPU();
  for (DType dt : kAllDtypes) {
    Tensor base = Tensor::zeros({5, 8}, dt, Device::cuda());
    slice(transpose(base, 0, 1), 0, 1, 8, 3).fill_(2.5);  // columns 1, 4, 7
    Tensor want = Tensor::zeros({5, 8}, dt);
    slice(transpose(want, 0, 1), 0, 1, 8, 3).fill_(2.5);
    EXPECT_TRUE(bytes_of(base) == bytes_of(want)) << dtype_name(dt);
    EXPECT_EQ(transpose(base, 0, 1).to_vector(), transpose(want, 0, 1).to_vector()) << dtype_name(dt);
    EXPECT_EQ(slice(slice(base, 0, 0, 1), 1, 4, 5).item(), want.to_vector()[4]) << dtype_name(dt);  // element (0, 4)
    EXPECT_EQ(Tensor::ones({3}, dt, Device::cuda()).to_vector(), (std::vector<double>{1, 1, 1})) << dtype_name(dt);
    EXPECT_EQ(Tensor::full({2}, -3.0, dt, Device::cuda()).to_vector(), (std::vector<double>{-3, -3})) << dtype_name(dt);
    // zero_ of a contiguous run inside a buffer (a memset of its bytes): rows 1-2 only.
    Tensor ones = Tensor::ones({5, 8}, dt, Device::cuda()), want_ones = Tensor::ones({5, 8}, dt);
    slice(ones, 0, 1, 3).zero_();
    slice(want_ones, 0, 1, 3).zero_();
    EXPECT_TRUE(bytes_of(ones) == bytes_of(want_ones)) << dtype_name(dt) << " zero_ of rows 1-2";
  }
  EXPECT_EQ(Tensor::scalar(1.25, DType::F32, Device::cuda()).item(), 1.25);
  EXPECT_EQ(Tensor::arange(5, DType::I64, Device::cuda()).to_int_vector(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

// A small upload goes through a page-locked staging buffer and is queued without a wait, so the
// source may change at once: each of ten uploads keeps the values it had; the first ones (fewer
// than the staging buffers) make no host wait. A large one waits, and a DeferredScalar reads a
// GPU value after the next wait without one of its own.
TEST(CudaTensor, SmallUploadsWaitForNothingAndKeepTheirValues) {
  ZDL_REQUIRE_GPU();
  Tensor host = Tensor::empty({1000}, DType::F32);
  std::vector<Tensor> up;
  synchronize(Device::cuda());
  const int64_t waits = cuda_host_waits();
  for (int i = 0; i < 10; ++i) {
    host.fill_(static_cast<double>(i));
    up.push_back(host.to(Device::cuda()));
    if (i == 2) EXPECT_EQ(cuda_host_waits(), waits) << "three small uploads";
  }
  for (int i = 0; i < 10; ++i) EXPECT_EQ(up[static_cast<size_t>(i)].to_vector(), std::vector<double>(1000, i)) << i;
  Tensor big = Tensor::full({1 << 19}, 2.0, DType::F32);  // 2 MiB
  const int64_t before = cuda_host_waits();
  Tensor big_up = big.to(Device::cuda());
  EXPECT_EQ(cuda_host_waits(), before + 1);
  DeferredScalar later(sum(big_up));
  synchronize(Device::cuda());
  const int64_t after_sync = cuda_host_waits();
  EXPECT_EQ(later.value(), 2.0 * (1 << 19));
  EXPECT_EQ(cuda_host_waits(), after_sync);
  DeferredScalar first(sum(big_up));
  EXPECT_EQ(first.value(), 2.0 * (1 << 19));  // read before any wait: it waits itself
  EXPECT_EQ(cuda_host_waits(), after_sync + 1);
}

TEST(CudaTensor, LargeStridedViewsUse64BitIndexMath) {
  ZDL_REQUIRE_GPU();
  // A bf16 buffer just over 2^31 elements (4 GiB): a view whose largest offset is >= 2^31 makes
  // the strided kernels take their 64-bit index path.
  const int64_t n = (int64_t{1} << 31) + 64;
  Tensor big = Tensor::zeros({n}, DType::BF16, Device::cuda());
  Tensor sparse = slice(big, 0, 0, n, int64_t{1} << 30);  // offsets 0, 2^30, 2^31
  ASSERT_EQ(sparse.numel(), 3);
  sparse.fill_(1.5);
  EXPECT_EQ(slice(big, 0, (int64_t{1} << 31) - 1, (int64_t{1} << 31) + 2).to_vector(), (std::vector<double>{0, 1.5, 0}));
  add_(sparse, Tensor::full({3}, 0.5, DType::BF16, Device::cuda()));
  EXPECT_EQ(sparse.to_vector(), (std::vector<double>{2, 2, 2}));
  EXPECT_EQ(sum(sparse).item(), 6.0);
}

}  // namespace zdl

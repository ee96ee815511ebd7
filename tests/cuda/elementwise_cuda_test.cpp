// CUDA elementwise kernels against their CPU twins. Skips where no GPU is visible.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/ops.h"

namespace zdl {

#define ZDL_REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device (or CPU-only build)"

double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return diff / scale;
}

TEST(CudaElementwise, BinaryOpsMatchCpu) {
  ZDL_REQUIRE_GPU();
  for (int64_t n : {1, 7, 1023, 100003}) {
    Tensor a = Tensor::randn({n}, 1), b = Tensor::rand({n}, 2, DType::F32, Device::cpu(), 0, 0.5, 2.0);
    Tensor da = a.to(Device::cuda()), db = b.to(Device::cuda());
    EXPECT_LT(max_rel_diff(add(da, db).to_vector(), add(a, b).to_vector()), 1e-6) << n;
    EXPECT_LT(max_rel_diff(sub(da, db).to_vector(), sub(a, b).to_vector()), 1e-6) << n;
    EXPECT_LT(max_rel_diff(mul(da, db).to_vector(), mul(a, b).to_vector()), 1e-6) << n;
    EXPECT_LT(max_rel_diff(div(da, db).to_vector(), div(a, b).to_vector()), 1e-5) << n;
  }
}

TEST(CudaElementwise, Bf16CastRoundTrip) {
  ZDL_REQUIRE_GPU();
  Tensor a = Tensor::randn({4099}, 3);
  Tensor gpu_bf16 = cast(a.to(Device::cuda()), DType::BF16);
  Tensor cpu_bf16 = cast(a, DType::BF16);
  // Both round to nearest even: the bits must agree exactly.
  EXPECT_EQ(gpu_bf16.to(Device::cpu()).to_vector(), cpu_bf16.to_vector());
  EXPECT_LT(max_rel_diff(cast(gpu_bf16, DType::F32).to_vector(), a.to_vector()), 1e-2);
}

TEST(CudaElementwise, MemoryLedgerCountsDeviceBytes) {
  ZDL_REQUIRE_GPU();
  int64_t before = memory_ledger().stats(Device::cuda()).total_current;
  {
    Tensor t = Tensor::zeros({1000}, DType::F32, Device::cuda());
    EXPECT_EQ(memory_ledger().stats(Device::cuda()).total_current - before, 4000);
  }
  EXPECT_EQ(memory_ledger().stats(Device::cuda()).total_current, before);
}

}  // namespace zdl

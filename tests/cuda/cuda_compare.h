// Helpers for CUDA op tests: run an op forward and backward on the CPU and on the GPU from the
// same inputs and the same output gradient, then compare outputs and input gradients (relative
// to the largest reference value) or their bytes. The CPU op is the oracle.
//
//   OpRun cpu = run_op(f, {x, w}, Device::cpu()), gpu = run_op(f, {x, w}, Device::cuda());
//   expect_close(gpu, cpu, 1e-5, "layer_norm rows=7 C=33");
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "autograd/ops.h"

// GPU tests skip where no device is visible (CI, CPU-only builds).
#define ZDL_REQUIRE_GPU() \
  if (!::zdl::cuda_available()) GTEST_SKIP() << "no CUDA device (or CPU-only build)"

namespace zdl::cuda_test {

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

// An op's output and the gradients of its inputs (undefined where none), copied to the CPU.
struct OpRun {
  Tensor out;
  std::vector<Tensor> grads;
};

// Copies `inputs` to `device` as fresh leaves (floating ones require grad), runs f, backpropagates
// a random output gradient drawn from `grad_seed` (the same values on every device; skipped if
// grad_seed == 0) and returns everything on the CPU.
inline OpRun run_op(const OpFn& f, const std::vector<Tensor>& inputs, Device device, uint64_t grad_seed = 99) {
  std::vector<Tensor> leaves;
  for (const Tensor& t : inputs) {
    if (!t.defined()) {
      leaves.push_back(t);
      continue;
    }
    Tensor l = t.detach().to(device);  // a new leaf (on the CPU: sharing t's bytes)
    if (is_floating(l.dtype()) && grad_seed != 0) l.set_requires_grad(true);
    leaves.push_back(l);
  }
  OpRun r;
  Tensor out = f(leaves);
  if (grad_seed != 0 && out.requires_grad()) {
    Tensor g = Tensor::randn(out.shape(), grad_seed, out.dtype()).to(device);
    out.backward(g);
  }
  r.out = out.to(Device::cpu());
  for (const Tensor& l : leaves)
    r.grads.push_back(l.defined() && l.requires_grad() && l.grad().defined() ? l.grad().to(Device::cpu()) : Tensor());
  return r;
}

// max |got - want| / max(max |want|, floor) (0 when both are all zeros). A floor is for
// values that are exactly zero in exact arithmetic: both sides then hold the rounding residue
// of terms of about that size, which max |want| would compare with each other.
inline double rel_diff(const Tensor& got, const Tensor& want, double floor = 0) {
  std::vector<double> a = got.to_vector(), b = want.to_vector();
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
    if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
  }
  return diff == 0 ? 0 : diff / std::max({scale, floor, 1e-30});
}

// The bytes of a tensor's elements (any device, any layout).
inline std::vector<uint8_t> bytes_of(const Tensor& t) {
  Tensor c = t.to(Device::cpu()).contiguous_copy();
  const auto* p = static_cast<const uint8_t*>(c.raw_data());
  return std::vector<uint8_t>(p, p + c.nbytes());
}

// Outputs and every input gradient: same shape and dtype, relative difference below tol.
// grad_floor: the size of the terms a gradient is formed from, for shapes whose exact
// gradient is zero (softmax over one key, layer_norm over one feature; see rel_diff).
inline void expect_close(const OpRun& got, const OpRun& want, double tol, const std::string& what,
                         double grad_floor = 0) {
  ASSERT_EQ(got.out.shape(), want.out.shape()) << what;
  EXPECT_EQ(got.out.dtype(), want.out.dtype()) << what;
  EXPECT_LT(rel_diff(got.out, want.out), tol) << what << ": forward";
  ASSERT_EQ(got.grads.size(), want.grads.size()) << what;
  for (size_t i = 0; i < want.grads.size(); ++i) {
    ASSERT_EQ(got.grads[i].defined(), want.grads[i].defined()) << what << ": gradient of input " << i;
    if (!want.grads[i].defined()) continue;
    ASSERT_EQ(got.grads[i].shape(), want.grads[i].shape()) << what << ": gradient of input " << i;
    EXPECT_EQ(got.grads[i].dtype(), want.grads[i].dtype()) << what << ": gradient of input " << i;
    EXPECT_LT(rel_diff(got.grads[i], want.grads[i], grad_floor), tol) << what << ": gradient of input " << i;
  }
}

// Output and gradients bit for bit.
inline void expect_bit_equal(const OpRun& a, const OpRun& b, const std::string& what) {
  EXPECT_TRUE(bytes_of(a.out) == bytes_of(b.out)) << what << ": forward bits differ";
  ASSERT_EQ(a.grads.size(), b.grads.size()) << what;
  for (size_t i = 0; i < a.grads.size(); ++i) {
    ASSERT_EQ(a.grads[i].defined(), b.grads[i].defined()) << what << ": gradient of input " << i;
    if (a.grads[i].defined())
      EXPECT_TRUE(bytes_of(a.grads[i]) == bytes_of(b.grads[i])) << what << ": bits of gradient " << i << " differ";
  }
}

// The message of the zdl::Error f throws ("" and a test failure if none), without the
// " (<condition> failed at <file>:<line>)" suffix, so CPU and CUDA errors can be compared.
template <class F>
std::string error_text(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    std::string m = e.what();
    size_t at = m.rfind(" failed at ");
    if (at != std::string::npos) {
      size_t open = m.rfind(" (", at);
      if (open != std::string::npos) m.resize(open);
    }
    return m;
  }
  ADD_FAILURE() << "expected a zdl::Error";
  return "";
}

// Sets an environment variable for the scope (e.g. ZDL_CUDNN_ATTENTION=0: attention on zerodl's
// own kernels), restoring the previous value.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// f32 inputs compare at 1e-5, bf16 at 1e-2 (one bf16 rounding is 2^-9 relative).
inline double tolerance(DType dt) { return dt == DType::F32 ? 1e-5 : 1e-2; }

// The compute dtypes the CUDA ops support.
inline constexpr DType kDtypes[] = {DType::F32, DType::BF16};

// f on the CPU and on the GPU from the same inputs (of dtype dt): outputs and input gradients
// within tolerance(dt).
inline void compare(const OpFn& f, const std::vector<Tensor>& inputs, DType dt, const std::string& what) {
  OpRun cpu = run_op(f, inputs, Device::cpu()), gpu = run_op(f, inputs, Device::cuda());
  expect_close(gpu, cpu, tolerance(dt), what + " " + dtype_name(dt));
}

}  // namespace zdl::cuda_test

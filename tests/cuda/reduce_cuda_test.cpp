// CUDA reductions (sum, mean, sum_to) against the CPU ops: outputs and input gradients in f32
// (relative 1e-5) and bf16 (1e-2) over every kind of dims (rows, columns, middle blocks,
// non-adjacent dims that need a permute, all), keepdim, strided inputs, and sizes on both sides
// of the chunked two-pass path; the kernel against its CPU twin; bit-equal repeated runs; empty
// reductions and the CPU's errors. Skips without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "autograd/ops.h"
#include "cuda_compare.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cuda/reduce.h"

namespace zdl {

using namespace cuda_test;
using TL = std::vector<Tensor>;

namespace {


struct Case {
  Shape shape;
  std::vector<int64_t> dims;
};

// Row sums (inner 1), column sums (inner > 1), middle blocks, permuted dims, everything; the
// big ones cross the chunked path (few outputs, long reductions).
const Case kCases[] = {
    {{1}, {0}},
    {{7}, {0}},
    {{1023}, {0}},
    {{129, 33}, {0}},
    {{129, 33}, {1}},
    {{129, 33}, {0, 1}},
    {{3, 5, 7}, {1}},
    {{3, 5, 7}, {0, 2}},     // not one block: permuted to the end first
    {{3, 5, 7}, {-1, 0}},    // negative and unsorted dims
    {{2, 3, 5, 7}, {1, 2}},  // a middle block: outer 2, inner 7
    {{16385, 65}, {0}},      // bias gradient shape: columns over many rows (chunked)
    {{3, 200001}, {1}},      // long rows (chunked)
    {{1 << 20}, {0}},        // one long row: a sum over everything (chunked)
    {{2, 3001, 5}, {1}},     // chunked columns with outer > 1
    {{1023, 1}, {0}},
};

}  // namespace

TEST(CudaReduce, SumMatchesCpu) {
  ZDL_REQUIRE_GPU();
  for (DType dt : kDtypes)
    for (const Case& c : kCases)
      for (bool keepdim : {false, true}) {
        Tensor x = Tensor::randn(c.shape, 1, dt);
        compare([&](const TL& t) { return sum(t[0], c.dims, keepdim); }, {x}, dt,
                "sum " + shape_str(c.shape) + " dims " + shape_str(c.dims) + (keepdim ? " keepdim" : ""));
      }
}

TEST(CudaReduce, MeanMatchesCpu) {
  ZDL_REQUIRE_GPU();
  for (DType dt : kDtypes) {
    for (const Case& c : kCases) {
      Tensor x = Tensor::randn(c.shape, 2, dt);
      compare([&](const TL& t) { return mean(t[0], c.dims, /*keepdim=*/false); }, {x}, dt,
              "mean " + shape_str(c.shape) + " dims " + shape_str(c.dims));
    }
    Tensor x = Tensor::randn({129, 33}, 3, dt);
    compare([](const TL& t) { return mean(t[0]); }, {x}, dt, "mean all");
    // The scaled sum is one kernel on CUDA: the bf16 mean rounds once, as the CPU's f32 detour.
    OpRun cpu = run_op([](const TL& t) { return mean(t[0], {1}, true); }, {x}, Device::cpu());
    OpRun gpu = run_op([](const TL& t) { return mean(t[0], {1}, true); }, {x}, Device::cuda());
    if (dt == DType::BF16) EXPECT_LT(rel_diff(gpu.out, cpu.out), 1e-6) << "bf16 mean should match the CPU's bits";
  }
}

TEST(CudaReduce, StridedInputs) {
  ZDL_REQUIRE_GPU();
  for (DType dt : kDtypes) {
    Tensor x = Tensor::randn({65, 129}, 4, dt);
    compare([](const TL& t) { return sum(transpose(t[0], 0, 1), {0}); }, {x}, dt, "sum(transpose) dim 0");
    compare([](const TL& t) { return sum(slice(t[0], 1, 1, 129, 3), {1}); }, {x}, dt, "sum(slice) dim 1");
    compare([](const TL& t) { return mean(expand(slice(t[0], 0, 0, 1), {7, 129}), {0, 1}); }, {x}, dt, "mean(expand)");
  }
}

TEST(CudaReduce, SumToReducesBroadcastDims) {
  ZDL_REQUIRE_GPU();
  for (DType dt : kDtypes) {
    Tensor g = Tensor::randn({4, 129, 33}, 5, dt);
    for (const Shape& to : {Shape{33}, Shape{129, 1}, Shape{1, 129, 33}, Shape{4, 1, 33}, Shape{1}}) {
      Tensor cpu = sum_to(g, to), gpu = sum_to(g.to(Device::cuda()), to);
      ASSERT_EQ(gpu.shape(), to);
      EXPECT_LT(rel_diff(gpu.to(Device::cpu()), cpu), tolerance(dt)) << shape_str(to) << " " << dtype_name(dt);
    }
  }
}

TEST(CudaReduce, KernelMatchesCpuTwin) {
  ZDL_REQUIRE_GPU();
#ifdef ZDL_WITH_CUDA
  struct K {
    int64_t outer, reduce, inner;
  };
  for (K k : {K{1, 1, 1}, K{7, 1023, 1}, K{1, 1 << 20, 1}, K{3, 100003, 1}, K{1, 16385, 65}, K{5, 7, 129},
              K{2, 3001, 5}, K{1000, 3, 2}, K{1, 0, 4}}) {
    Tensor x = Tensor::randn({k.outer * k.reduce * k.inner}, 6);
    Tensor want = Tensor::empty({k.outer * k.inner});
    if (k.reduce == 0) want.zero_();
    else kernels::cpu::sum_reduce<float>(k.outer, k.reduce, k.inner, x.data<float>(), want.data<float>());
    Tensor gx = x.to(Device::cuda()), got = Tensor::empty({k.outer * k.inner}, DType::F32, Device::cuda());
    size_t ws_bytes = kernels::cuda::sum_reduce_workspace_bytes(k.outer, k.reduce, k.inner);
    Tensor ws = Tensor::empty({static_cast<int64_t>(ws_bytes / 8) + 1}, DType::F64, Device::cuda());
    kernels::cuda::sum_reduce(DType::F32, k.outer, k.reduce, k.inner, gx.raw_data(), got.raw_data(), ws.raw_data());
    // Both accumulate in double and round once to f32: equal up to the last bit.
    EXPECT_LT(rel_diff(got.to(Device::cpu()), want), 1e-6) << k.outer << "," << k.reduce << "," << k.inner;
    // scale (the fused mean): the f32 sum times (float)scale
    kernels::cuda::sum_reduce(DType::F32, k.outer, k.reduce, k.inner, gx.raw_data(), got.raw_data(), ws.raw_data(),
                              0.25);
    EXPECT_LT(rel_diff(got.to(Device::cpu()), mul(want, 0.25)), 1e-6) << "scaled";
  }
#endif
}

TEST(CudaReduce, Deterministic) {
  ZDL_REQUIRE_GPU();
  for (DType dt : kDtypes)
    for (const Case& c : kCases) {
      Tensor x = Tensor::randn(c.shape, 7, dt);
      OpFn f = [&](const TL& t) { return sum(t[0], c.dims); };
      expect_bit_equal(run_op(f, {x}, Device::cuda()), run_op(f, {x}, Device::cuda()),
                       "sum " + shape_str(c.shape) + " " + dtype_name(dt));
    }
}

TEST(CudaReduce, EmptyReductionsAndErrors) {
  ZDL_REQUIRE_GPU();
  Tensor e = Tensor::zeros({3, 0, 4}), ge = e.to(Device::cuda());
  Tensor s = sum(ge, {1});
  EXPECT_EQ(s.shape(), (Shape{3, 4}));
  EXPECT_EQ(s.to_vector(), std::vector<double>(12, 0.0));
  EXPECT_EQ(sum(ge, {0}).shape(), (Shape{0, 4}));
  EXPECT_EQ(error_text([&] { mean(ge, {1}); }), error_text([&] { mean(e, {1}); }));
  EXPECT_EQ(error_text([&] { mean(ge); }), error_text([&] { mean(e); }));
  Tensor x = Tensor::zeros({3, 4}), gx = x.to(Device::cuda());
  EXPECT_EQ(error_text([&] { sum(gx, {0, 0}); }), error_text([&] { sum(x, {0, 0}); }));
  EXPECT_EQ(error_text([&] { sum(gx, {2}); }), error_text([&] { sum(x, {2}); }));
  EXPECT_EQ(error_text([&] { sum_to(gx, {5}); }), error_text([&] { sum_to(x, {5}); }));
}

}  // namespace zdl

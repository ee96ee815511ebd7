// CUDA elementwise ops against the CPU ops on the same inputs: outputs and input gradients of
// the broadcasting binary ops, the unary/scalar ops and cast, in f32 (relative 1e-5) and bf16
// (1e-2), on odd sizes, broadcast shapes and strided (transposed, sliced) device operands;
// in-place add_/scale_ (gradient accumulation), the engine's accumulation across uses and
// backward passes, determinism (bit-equal runs), and the CPU's errors. Skips without a GPU.
//
// bf16 references are the CPU ops on the same bf16 tensors: they compute in f32 and round once,
// as the CUDA kernels do, so forward results are mostly bit-equal and gradients differ by about
// one bf16 rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "core/memory.h"
#include "cuda_compare.h"

namespace zdl {

using namespace cuda_test;
using TL = std::vector<Tensor>;

namespace {

// Values in [lo, hi), as dtype (CPU).
Tensor uniform(const Shape& shape, uint64_t seed, DType dt, double lo = -2.0, double hi = 2.0) {
  return Tensor::rand(shape, seed, dt, Device::cpu(), 0, lo, hi);
}

}  // namespace

TEST(CudaElementwise, BinaryOpsMatchCpuWithBroadcasting) {
  ZDL_REQUIRE_GPU();
  struct Case {
    Shape a, b;
  };
  const Case cases[] = {{{1}, {1}},          {{7}, {7}},           {{1023}, {1}},        {{1}, {1023}},
                        {{129, 7}, {7}},     {{129, 7}, {129, 1}}, {{3, 1, 33}, {1, 5, 1}}, {{2, 3, 5, 7}, {5, 1}},
                        {{100003}, {100003}}, {{33, 1}, {1, 65}}};
  const std::pair<const char*, Tensor (*)(const Tensor&, const Tensor&)> ops[] = {
      {"add", add}, {"sub", sub}, {"mul", mul}, {"div", div}};
  for (DType dt : kDtypes)
    for (const Case& c : cases)
      for (auto [name, op] : ops) {
        Tensor a = uniform(c.a, 1, dt), b = uniform(c.b, 2, dt, 0.5, 2.0);  // b away from 0 for div
        compare([op = op](const TL& x) { return op(x[0], x[1]); }, {a, b}, dt,
                std::string(name) + " " + shape_str(c.a) + " " + shape_str(c.b));
      }
}

TEST(CudaElementwise, BinaryOpsOnStridedDeviceViews) {
  ZDL_REQUIRE_GPU();
  for (DType dt : kDtypes) {
    Tensor a = uniform({33, 129}, 3, dt), b = uniform({129, 66}, 4, dt, 0.5, 2.0), c = uniform({129}, 5, dt);
    // transposed a [129, 33] against every other column of b [129, 33]
    compare([](const TL& x) { return mul(transpose(x[0], 0, 1), slice(x[1], 1, 0, 66, 2)); }, {a, b}, dt,
            "mul(transpose, slice)");
    compare([](const TL& x) { return div(slice(x[1], 1, 1, 66, 2), transpose(x[0], 0, 1)); }, {a, b}, dt,
            "div(slice, transpose)");
    // a broadcast row against a transposed operand, and a permuted 3-D operand
    compare([](const TL& x) { return sub(transpose(x[0], 0, 1), unsqueeze(x[2], 1)); }, {a, b, c}, dt,
            "sub(transpose, column)");
    Tensor d = uniform({5, 7, 9}, 6, dt), e = uniform({9, 5, 1}, 7, dt);
    compare([](const TL& x) { return add(permute(x[0], {2, 0, 1}), x[1]); }, {d, e}, dt, "add(permute, broadcast)");
  }
}

TEST(CudaElementwise, UnaryOpsMatchCpu) {
  ZDL_REQUIRE_GPU();
  struct U {
    const char* name;
    OpFn f;
    double lo, hi;
  };
  const U ops[] = {
      {"neg", [](const TL& x) { return neg(x[0]); }, -2, 2},
      {"exp", [](const TL& x) { return exp(x[0]); }, -3, 3},
      {"log", [](const TL& x) { return log(x[0]); }, 0.1, 4},
      {"sqrt", [](const TL& x) { return sqrt(x[0]); }, 0.1, 4},
      {"tanh", [](const TL& x) { return tanh(x[0]); }, -3, 3},
      {"square", [](const TL& x) { return square(x[0]); }, -2, 2},
      {"add_scalar", [](const TL& x) { return add(x[0], 0.37); }, -2, 2},
      {"mul_scalar", [](const TL& x) { return mul(x[0], -1.7); }, -2, 2},
      {"rsub", [](const TL& x) { return rsub(0.3, x[0]); }, -2, 2},
      {"rdiv", [](const TL& x) { return rdiv(1.5, x[0]); }, 0.5, 3},
      // the same ops on a transposed device view
      {"exp(transpose)", [](const TL& x) { return exp(transpose(x[0], 0, -1)); }, -3, 3},
      {"tanh(slice)", [](const TL& x) { return tanh(slice(x[0], 0, 0, x[0].size(0), 2)); }, -3, 3},
      {"rdiv(transpose)", [](const TL& x) { return rdiv(-2.0, transpose(x[0], 0, -1)); }, 0.5, 3},
  };
  const Shape shapes[] = {{1, 1}, {7, 1}, {129, 33}, {1023, 5}, {3, 100003}};
  for (DType dt : kDtypes)
    for (const U& u : ops)
      for (const Shape& s : shapes) compare(u.f, {uniform(s, 11, dt, u.lo, u.hi)}, dt, std::string(u.name) + " " + shape_str(s));
}

TEST(CudaElementwise, ChainedOpsAndEngineAccumulation) {
  ZDL_REQUIRE_GPU();
  // x is used three times (the engine sums the contributions with add) and a broadcast bias
  // twice; mean reduces at the end.
  for (DType dt : kDtypes) {
    Tensor x = uniform({37, 129}, 21, dt), b = uniform({129}, 22, dt);
    compare([](const TL& t) { return mean(mul(tanh(add(t[0], t[1])), sub(square(t[0]), t[1])) / (t[0] * t[0] + 1.0)); },
            {x, b}, dt, "chain");
  }
}

TEST(CudaElementwise, GradAccumulatesOverBackwardPasses) {
  ZDL_REQUIRE_GPU();
  for (DType dt : kDtypes) {
    auto grads_after_two_passes = [&](Device dev) {
      Tensor x = uniform({7, 33}, 31, dt).to(dev).set_requires_grad(true);
      Tensor w = uniform({33}, 32, dt).to(dev).set_requires_grad(true);
      sum(mul(x, w)).backward();
      sum(exp(mul(x, w))).backward();  // accumulates into the existing .grad with add_
      return std::make_pair(x.grad().to(Device::cpu()), w.grad().to(Device::cpu()));
    };
    auto [gx_cpu, gw_cpu] = grads_after_two_passes(Device::cpu());
    auto [gx_gpu, gw_gpu] = grads_after_two_passes(Device::cuda());
    EXPECT_LT(rel_diff(gx_gpu, gx_cpu), tolerance(dt)) << dtype_name(dt);
    EXPECT_LT(rel_diff(gw_gpu, gw_cpu), tolerance(dt)) << dtype_name(dt);
    EXPECT_EQ(gx_gpu.dtype(), dt);
  }
}

TEST(CudaElementwise, AddInPlaceOnStridedDestinationMatchesCpu) {
  ZDL_REQUIRE_GPU();
  for (DType dt : kDtypes) {
    Tensor base = uniform({129, 66}, 41, dt), src_full = uniform({129, 33}, 42, dt), src_row = uniform({33}, 43, dt);
    Tensor cpu = base.contiguous_copy(), gpu = base.to(Device::cuda());
    // every other column of a [129, 66] buffer, += a full [129, 33] and then a broadcast row
    add_(slice(cpu, 1, 0, 66, 2), src_full);
    add_(slice(gpu, 1, 0, 66, 2), src_full.to(Device::cuda()));
    add_(slice(cpu, 1, 1, 66, 2), src_row);
    add_(slice(gpu, 1, 1, 66, 2), src_row.to(Device::cuda()));
    // f32 adds are exact IEEE sums, bf16 adds round once: the same bits on both devices
    EXPECT_TRUE(bytes_of(gpu) == bytes_of(cpu)) << dtype_name(dt);
    // a transposed destination
    add_(transpose(cpu, 0, 1), uniform({66, 129}, 44, dt));
    add_(transpose(gpu, 0, 1), uniform({66, 129}, 44, dt).to(Device::cuda()));
    EXPECT_TRUE(bytes_of(gpu) == bytes_of(cpu)) << dtype_name(dt) << " transposed";
  }
}

TEST(CudaElementwise, ScaleInPlaceMatchesCpu) {
  ZDL_REQUIRE_GPU();
  for (DType dt : kDtypes)
    for (int64_t n : {1, 7, 1023, 100003}) {
      Tensor cpu = uniform({n}, 51, dt), gpu = cpu.to(Device::cuda());
      scale_(cpu, 0.123);
      scale_(gpu, 0.123);
      EXPECT_TRUE(bytes_of(gpu) == bytes_of(cpu)) << dtype_name(dt) << " n=" << n;
    }
}

TEST(CudaElementwise, AddInPlaceRejectsOverlappingDestination) {
  ZDL_REQUIRE_GPU();
  Tensor row = Tensor::zeros({1, 33}, DType::F32, Device::cuda());
  Tensor src = Tensor::ones({7, 33}, DType::F32, Device::cuda());
  // An expanded destination aliases its elements: concurrent += would race, so it is refused.
  std::string msg = error_text([&] { add_(expand(row, {7, 33}), src); });
  EXPECT_NE(msg.find("overlapping"), std::string::npos) << msg;
}

TEST(CudaElementwise, CastMatchesCpuBitForBit) {
  ZDL_REQUIRE_GPU();
  Tensor a = Tensor::randn({4099}, 3);
  Tensor gpu_bf16 = cast(a.to(Device::cuda()), DType::BF16);
  Tensor cpu_bf16 = cast(a, DType::BF16);
  // Both round to nearest even: the bits must agree exactly.
  EXPECT_TRUE(bytes_of(gpu_bf16) == bytes_of(cpu_bf16));
  EXPECT_LT(rel_diff(cast(gpu_bf16, DType::F32), a), 1e-2);
  // A strided source and the backward (cast of the gradient back to f32).
  Tensor m = Tensor::randn({65, 33}, 4);
  compare([](const TL& x) { return cast(transpose(x[0], 0, 1), DType::BF16); }, {m}, DType::BF16, "cast(transpose)");
  OpRun cpu = run_op([](const TL& x) { return cast(x[0], DType::F32); }, {m.to(DType::BF16)}, Device::cpu());
  OpRun gpu = run_op([](const TL& x) { return cast(x[0], DType::F32); }, {m.to(DType::BF16)}, Device::cuda());
  expect_bit_equal(gpu, cpu, "cast bf16 -> f32");
  // NaNs (sign kept, made quiet), infinities, ties and -0 round as on the CPU in the cast.
  Tensor special = Tensor::from_vector(std::vector<double>{NAN, -NAN, INFINITY, -INFINITY, 1.00390625, 1.01171875, -0.0},
                                      {7}, DType::F32);
  EXPECT_TRUE(bytes_of(cast(special.to(Device::cuda()), DType::BF16)) == bytes_of(cast(special, DType::BF16)));
  // In an arithmetic kernel's bf16 store too, except a NaN's bits: the GPU's f32 arithmetic
  // returns one canonical NaN for any NaN operand (x86 keeps the operand's sign and payload), so
  // there a NaN need only stay a NaN.
  Tensor special_bf16 = cast(special, DType::BF16);
  std::vector<double> gpu_product = mul(special_bf16.to(Device::cuda()), 1.0).to_vector();
  std::vector<double> cpu_product = mul(special_bf16, 1.0).to_vector();
  ASSERT_EQ(gpu_product.size(), cpu_product.size());
  for (size_t i = 0; i < cpu_product.size(); ++i) {
    if (std::isnan(cpu_product[i])) {
      EXPECT_TRUE(std::isnan(gpu_product[i])) << "element " << i;
    } else {
      EXPECT_EQ(std::signbit(gpu_product[i]), std::signbit(cpu_product[i])) << "element " << i;
      EXPECT_EQ(gpu_product[i], cpu_product[i]) << "element " << i;
    }
  }
}

// The contiguous kernels read and write 16-byte packs where every pointer is 16-byte aligned
// and go element by element otherwise: from element 0, 1 and 3 of a buffer (aligned, then
// not), over lengths that leave a tail after the last pack, each must give the CPU's bits.
TEST(CudaElementwise, ContiguousKernelsGiveTheCpuBitsAlignedOrNot) {
  ZDL_REQUIRE_GPU();
  for (DType dt : kDtypes)
    for (int64_t off : {0, 1, 3})
      for (int64_t n : {5, 4099, 65543}) {
        const std::string what = std::string(dtype_name(dt)) + " from element " + std::to_string(off) + " n=" +
                                 std::to_string(n);
        Tensor a_full = uniform({n + 3}, 61, dt), b_full = uniform({n + 3}, 62, dt);
        Tensor a = slice(a_full, 0, off, off + n), b = slice(b_full, 0, off, off + n);
        Tensor ga = slice(a_full.to(Device::cuda()), 0, off, off + n), gb = slice(b_full.to(Device::cuda()), 0, off, off + n);
        EXPECT_TRUE(bytes_of(add(ga, gb)) == bytes_of(add(a, b))) << "add " << what;
        Tensor ca = a.contiguous_copy(), gca = slice(a_full.to(Device::cuda()), 0, off, off + n);
        add_(ca, b);
        add_(gca, gb);
        EXPECT_TRUE(bytes_of(gca) == bytes_of(ca)) << "add_ " << what;
        scale_(ca, 0.123);
        scale_(gca, 0.123);
        EXPECT_TRUE(bytes_of(gca) == bytes_of(ca)) << "scale_ " << what;
        const DType other = dt == DType::F32 ? DType::BF16 : DType::F32;
        EXPECT_TRUE(bytes_of(cast(ga, other)) == bytes_of(cast(a, other))) << "cast " << what;
        Tensor into_cpu = Tensor::empty({n + 3}, other), into_gpu = Tensor::empty({n + 3}, other, Device::cuda());
        slice(into_cpu, 0, off, off + n).copy_(a);
        slice(into_gpu, 0, off, off + n).copy_(ga);
        EXPECT_TRUE(bytes_of(slice(into_gpu, 0, off, off + n)) == bytes_of(slice(into_cpu, 0, off, off + n)))
            << "copy_ to " << dtype_name(other) << " " << what;
        Tensor z = a_full.to(Device::cuda());
        slice(z, 0, off, off + n).zero_();
        std::vector<double> zv = z.to_vector(), av = a_full.to_vector();
        for (int64_t i = 0; i < n + 3; ++i)
          ASSERT_EQ(zv[static_cast<size_t>(i)], i >= off && i < off + n ? 0.0 : av[static_cast<size_t>(i)])
              << "zero_ " << what << " at " << i;
      }
}

// A contiguous bf16 -> f32 copy keeps a NaN's sign and payload, as the CPU's (and the strided
// copy) do: the bits shifted up.
TEST(CudaElementwise, ContiguousBf16ToF32CopyKeepsNanPayloads) {
  ZDL_REQUIRE_GPU();
  Tensor bf = Tensor::empty({24}, DType::BF16);
  auto* bits = static_cast<uint16_t*>(bf.raw_data());
  for (int i = 0; i < 24; ++i) bits[i] = static_cast<uint16_t>(i % 2 ? 0xffc1 + i : 0x7f81 + i);  // NaNs, both signs
  Tensor cpu = Tensor::empty({24}, DType::F32), gpu = Tensor::empty({24}, DType::F32, Device::cuda());
  cpu.copy_(bf);
  gpu.copy_(bf.to(Device::cuda()));
  EXPECT_TRUE(bytes_of(gpu) == bytes_of(cpu));
  EXPECT_TRUE(bytes_of(cast(bf.to(Device::cuda()), DType::F32)) == bytes_of(cast(bf, DType::F32)));
}

TEST(CudaElementwise, Deterministic) {
  ZDL_REQUIRE_GPU();
  for (DType dt : kDtypes) {
    Tensor x = uniform({129, 1023}, 61, dt), b = uniform({1023}, 62, dt, 0.5, 2);
    OpFn f = [](const TL& t) { return sum(div(tanh(t[0]), t[1]), {0}); };
    expect_bit_equal(run_op(f, {x, b}, Device::cuda()), run_op(f, {x, b}, Device::cuda()),
                     std::string("div/tanh/sum ") + dtype_name(dt));
  }
}

TEST(CudaElementwise, ErrorsMatchCpu) {
  ZDL_REQUIRE_GPU();
  Tensor a = Tensor::zeros({3, 4}), b = Tensor::zeros({5, 4});
  Tensor ga = a.to(Device::cuda()), gb = b.to(Device::cuda());
  EXPECT_EQ(error_text([&] { add(ga, gb); }), error_text([&] { add(a, b); }));
  EXPECT_EQ(error_text([&] { add_(ga, gb); }), error_text([&] { add_(a, b); }));
  EXPECT_EQ(error_text([&] { add_(ga, Tensor::zeros({3, 4}, DType::BF16, Device::cuda())); }),
            error_text([&] { add_(a, Tensor::zeros({3, 4}, DType::BF16)); }));
  Tensor i = Tensor::zeros({3, 4}, DType::I64);
  EXPECT_EQ(error_text([&] { exp(i.to(Device::cuda())); }), error_text([&] { exp(i); }));
}

TEST(CudaElementwise, DeviceMismatchNamesBothDevices) {
  ZDL_REQUIRE_GPU();
  Tensor cpu = Tensor::ones({3, 4}), gpu = Tensor::ones({3, 4}, DType::F32, Device::cuda());
  for (const std::string& msg : {error_text([&] { add(cpu, gpu); }), error_text([&] { mul(gpu, cpu); }),
                                 error_text([&] { add_(gpu, cpu); }), error_text([&] { div(cpu, gpu); })}) {
    EXPECT_NE(msg.find("cpu"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cuda:0"), std::string::npos) << msg;
  }
}

TEST(CudaElementwise, F64OnCudaIsAClearError) {
  ZDL_REQUIRE_GPU();
  Tensor d = Tensor::ones({3}, DType::F64, Device::cuda());  // storage and copies work for any dtype
  EXPECT_EQ(d.to_vector(), (std::vector<double>{1, 1, 1}));
  std::string msg = error_text([&] { exp(d); });
  EXPECT_NE(msg.find("f64"), std::string::npos) << msg;
  EXPECT_NE(msg.find("exp"), std::string::npos) << msg;
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

namespace zdl {

using namespace cuda_test;

// relu, sigmoid, silu, abs, maximum, minimum, where (forward and gradients) and argmax on the
// GPU against the CPU ops, f32 and bf16, with broadcasting.
TEST(CudaElementwise, ActivationsSelectionAndArgmaxMatchCpu) {
  ZDL_REQUIRE_GPU();
  using TL = std::vector<Tensor>;
  for (DType dt : kDtypes) {
    Tensor x = Tensor::rand({129, 33}, 7, dt, Device::cpu(), 0, -3.0, 3.0);
    Tensor y = Tensor::rand({33}, 8, dt, Device::cpu(), 0, -3.0, 3.0);
    const std::pair<const char*, Tensor (*)(const Tensor&)> unary_ops[] = {
        {"relu", relu}, {"sigmoid", sigmoid}, {"silu", silu}, {"abs", abs}};
    for (auto [name, op] : unary_ops) compare([op = op](const TL& v) { return op(v[0]); }, {x}, dt, name);
    compare([](const TL& v) { return maximum(v[0], v[1]); }, {x, y}, dt, "maximum");
    compare([](const TL& v) { return minimum(v[0], v[1]); }, {x, y}, dt, "minimum");
    Tensor cond = relu(Tensor::rand({129, 1}, 9, dt, Device::cpu(), 0, -1.0, 1.0));  // half zeros
    compare([cond](const TL& v) { return where(cond.to(v[0].device()), v[0], v[1]); }, {x, y}, dt, "where");
    EXPECT_EQ(argmax(x.to(Device::cuda())).to_vector(), argmax(x).to_vector()) << dtype_name(dt) << " argmax";
    EXPECT_EQ(argmax(x.to(Device::cuda()), 0).to_vector(), argmax(x, 0).to_vector()) << dtype_name(dt) << " argmax 0";
  }
}

}  // namespace zdl

// CUDA matrix products: the cuBLASLt kernels against the CPU's triple-loop reference
// (kernels/cpu/matmul.h gemm_reference, double accumulation) with every transpose combination,
// padded leading dimensions, accumulate, strided batches (shared operands too), K = 0, the fused
// bias epilogue and its unaligned-bias fallback, and misaligned pointers; then matmul and linear
// forward and backward against the CPU ops (f32 relative 1e-5, bf16 1e-2) on odd sizes with
// transposed, sliced and batched operands; bit-equal repeated runs; the workspace in the memory
// ledger; the MLP with its GELU in the epilogues; and the CPU's errors. Skips without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "autograd/ops.h"
#include "core/memory.h"
#include "cuda_compare.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cuda/matmul.h"

namespace zdl {

using namespace cuda_test;
using TL = std::vector<Tensor>;

namespace {


struct Dims {
  int64_t M, N, K;
};
const Dims kDims[] = {{1, 1, 1}, {7, 5, 3}, {129, 65, 33}, {33, 1023, 7}, {1, 129, 1023}, {1023, 1, 129}, {100, 96, 64}};

#ifdef ZDL_WITH_CUDA
// One GEMM problem on host buffers (f32 values exactly representable in dtype), run through
// kernels::cuda::gemm_batched on device copies in `dtype` and through gemm_reference per batch.
struct Problem {
  DType dtype;
  int64_t batch, M, N, K;
  bool ta, tb, accumulate;
  int64_t pad;           // extra elements per stored row (ld = cols + pad)
  bool share_a = false;  // stride_a = 0
  bool share_b = false;  // stride_b = 0
  int64_t offset = 0;    // element offset of every device pointer (misalignment)

  void run_and_check(uint64_t seed) const {
    const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
    const int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = N + pad;
    const int64_t sa = share_a ? 0 : a_rows * lda, sb = share_b ? 0 : b_rows * ldb, sc = M * ldc;
    const int64_t na = (share_a ? 1 : batch) * a_rows * lda, nb = (share_b ? 1 : batch) * b_rows * ldb,
                  nc = batch * sc;
    // Values rounded to dtype first, so the f32 reference sees exactly the device's inputs.
    Tensor a = Tensor::randn({na}, seed, dtype).to(DType::F32), b = Tensor::randn({nb}, seed + 1, dtype).to(DType::F32);
    Tensor c0 = Tensor::randn({nc}, seed + 2, dtype).to(DType::F32);
    Tensor want = c0.contiguous_copy();
    for (int64_t i = 0; i < batch; ++i)
      kernels::cpu::gemm_reference<float>(M, N, K, ta, a.data<float>() + i * sa, lda, tb, b.data<float>() + i * sb, ldb,
                                          want.data<float>() + i * sc, ldc, accumulate);
    auto on_device = [&](const Tensor& t) {  // [offset zeros, t] in dtype, and a pointer past the zeros
      Tensor d = Tensor::zeros({offset + t.numel()}, dtype, Device::cuda());
      slice(d, 0, offset, offset + t.numel()).copy_(t);
      return d;
    };
    Tensor da = on_device(a), db = on_device(b), dc = on_device(c0);
    const size_t es = element_size(dtype);
    auto at = [&](const Tensor& t) { return static_cast<char*>(t.raw_data()) + offset * es; };
    kernels::cuda::gemm_batched(dtype, batch, M, N, K, ta, at(da), lda, sa, tb, at(db), ldb, sb, at(dc), ldc, sc,
                                accumulate);
    Tensor got = slice(dc, 0, offset, offset + nc).to(Device::cpu()).to(DType::F32);
    // Compare only the M x N entries of every C; padding must be untouched.
    double diff = 0, scale = 1e-30;
    const float* g = got.data<float>();
    const float* w = want.data<float>();
    const float* c = c0.data<float>();
    for (int64_t i = 0; i < batch; ++i)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < ldc; ++n) {
          int64_t at_ = i * sc + m * ldc + n;
          if (n >= N) {
            EXPECT_EQ(g[at_], c[at_]) << "padding of C written at batch " << i << " row " << m << " col " << n;
            continue;
          }
          diff = std::max(diff, static_cast<double>(std::abs(g[at_] - w[at_])));
          scale = std::max(scale, static_cast<double>(std::abs(w[at_])));
        }
    EXPECT_LT(diff / scale, tolerance(dtype))
        << dtype_name(dtype) << " batch=" << batch << " M=" << M << " N=" << N << " K=" << K << " ta=" << ta
        << " tb=" << tb << " acc=" << accumulate << " pad=" << pad << " share_a=" << share_a << " share_b=" << share_b
        << " offset=" << offset;
  }
};
#endif

}  // namespace

TEST(CudaGemm, EveryTransposeAndAccumulateMatchesReference) {
  ZDL_REQUIRE_GPU();
#ifdef ZDL_WITH_CUDA
  uint64_t seed = 1;
  for (DType dt : kDtypes)
    for (Dims d : kDims)
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (bool acc : {false, true})
            for (int64_t pad : {0, 3})
              Problem{dt, 1, d.M, d.N, d.K, ta, tb, acc, pad}.run_and_check(seed += 3);
#endif
}

TEST(CudaGemm, StridedBatchedWithSharedOperands) {
  ZDL_REQUIRE_GPU();
#ifdef ZDL_WITH_CUDA
  uint64_t seed = 100;
  for (DType dt : kDtypes)
    for (Dims d : {Dims{7, 5, 3}, Dims{65, 33, 129}, Dims{1, 17, 31}})
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (auto [sa, sb] : {std::pair{false, false}, std::pair{true, false}, std::pair{false, true}})
            for (bool acc : {false, true}) {
              Problem p{dt, 5, d.M, d.N, d.K, ta, tb, acc, /*pad=*/1};
              p.share_a = sa;
              p.share_b = sb;
              p.run_and_check(seed += 3);
            }
#endif
}

TEST(CudaGemm, MisalignedPointersAndEmptyInnerDimension) {
  ZDL_REQUIRE_GPU();
#ifdef ZDL_WITH_CUDA
  // Pointers 1 and 3 elements past an allocation (2- to 12-byte alignment): the heuristic is told
  // the real alignment (or classic cuBLAS takes over), never a 256-byte assumption.
  uint64_t seed = 200;
  for (DType dt : kDtypes)
    for (int64_t offset : {1, 3})
      for (Dims d : {Dims{129, 65, 33}, Dims{8, 8, 8}}) {
        Problem p{dt, 3, d.M, d.N, d.K, false, true, false, 0};
        p.offset = offset;
        p.run_and_check(seed += 3);
      }
  // K = 0: C = 0, or C unchanged when accumulating.
  for (DType dt : kDtypes)
    for (bool acc : {false, true}) Problem{dt, 2, 5, 7, 0, false, false, acc, 2}.run_and_check(seed += 3);
#endif
}

TEST(CudaGemm, FusedBiasAndUnalignedBiasFallback) {
  ZDL_REQUIRE_GPU();
#ifdef ZDL_WITH_CUDA
  for (DType dt : kDtypes)
    for (Dims d : {Dims{1, 1, 1}, Dims{129, 65, 33}, Dims{33, 1023, 7}, Dims{7, 5, 0}})
      for (int64_t bias_offset : {0, 1}) {  // 1: a 2- or 4-byte aligned bias takes the fallback
        const int64_t M = d.M, N = d.N, K = d.K;
        Tensor x = Tensor::randn({M, K}, 1, dt), w = Tensor::randn({N, K}, 2, dt);
        Tensor bias_buf = Tensor::randn({N + bias_offset}, 3, dt);
        Tensor bias = slice(bias_buf, 0, bias_offset, N + bias_offset);
        // reference: y = x w^T + bias in f32 from the dtype's values
        Tensor want = Tensor::empty({M, N});
        Tensor xf = x.to(DType::F32), wf = w.to(DType::F32), bf = bias.contiguous_copy().to(DType::F32);
        kernels::cpu::fill_rows<float>(M, N, bf.data<float>(), want.data<float>());
        kernels::cpu::gemm_reference<float>(M, N, K, false, xf.data<float>(), std::max<int64_t>(K, 1), true,
                                            wf.data<float>(), std::max<int64_t>(K, 1), want.data<float>(), N, true);
        Tensor gx = x.to(Device::cuda()), gw = w.to(Device::cuda()), gb = bias_buf.to(Device::cuda());
        Tensor gy = Tensor::empty({M, N}, dt, Device::cuda());
        const void* bias_ptr = static_cast<const char*>(gb.raw_data()) + bias_offset * element_size(dt);
        kernels::cuda::gemm_bias(dt, M, N, K, false, gx.raw_data(), std::max<int64_t>(K, 1), true, gw.raw_data(),
                                 std::max<int64_t>(K, 1), bias_ptr, gy.raw_data(), N);
        EXPECT_LT(rel_diff(gy.to(Device::cpu()).to(DType::F32), want), tolerance(dt))
            << dtype_name(dt) << " M=" << M << " N=" << N << " K=" << K << " bias_offset=" << bias_offset;
      }
#endif
}

TEST(CudaGemm, WorkspaceIsInTheMemoryLedger) {
  ZDL_REQUIRE_GPU();
  Tensor a = Tensor::randn({3, 4}, 1).to(Device::cuda()), b = Tensor::randn({4, 5}, 2).to(Device::cuda());
  (void)matmul(a, b).to_vector();  // the thread's first GEMM allocates its 32 MiB workspace
  EXPECT_GE(memory_ledger().stats(Device::cuda()).current_of(MemoryCategory::Workspace), int64_t{32} << 20);
}

TEST(CudaMatmul, MatchesCpuForwardAndBackward) {
  ZDL_REQUIRE_GPU();
  for (DType dt : kDtypes) {
    for (Dims d : kDims) {
      Tensor a = Tensor::randn({d.M, d.K}, 1, dt), b = Tensor::randn({d.K, d.N}, 2, dt);
      std::string s = " M=" + std::to_string(d.M) + " N=" + std::to_string(d.N) + " K=" + std::to_string(d.K);
      compare([](const TL& x) { return matmul(x[0], x[1]); }, {a, b}, dt, "matmul" + s);
      // transposed views on the device (read in place through the transpose flags)
      Tensor at = Tensor::randn({d.K, d.M}, 3, dt), bt = Tensor::randn({d.N, d.K}, 4, dt);
      compare([](const TL& x) { return matmul(transpose(x[0], 0, 1), transpose(x[1], 0, 1)); }, {at, bt}, dt,
              "matmul(a^T, b^T)" + s);
    }
    // batched: same leading dims, 4-D, a shared 2-D b folded into rows, sliced (padded) operands
    Tensor a3 = Tensor::randn({5, 33, 17}, 5, dt), b3 = Tensor::randn({5, 17, 65}, 6, dt);
    compare([](const TL& x) { return matmul(x[0], x[1]); }, {a3, b3}, dt, "batched");
    Tensor a4 = Tensor::randn({2, 3, 7, 9}, 7, dt), b4 = Tensor::randn({2, 3, 9, 11}, 8, dt);
    compare([](const TL& x) { return matmul(x[0], transpose(transpose(x[1], -1, -2), -1, -2)); }, {a4, b4}, dt,
            "batched 4-D");
    compare([](const TL& x) { return matmul(transpose(x[1], -1, -2), transpose(x[0], -1, -2)); }, {a4, b4}, dt,
            "batched 4-D transposed");
    Tensor b2 = Tensor::randn({17, 129}, 9, dt);
    compare([](const TL& x) { return matmul(x[0], x[1]); }, {a3, b2}, dt, "shared 2-D b");
    Tensor wide = Tensor::randn({33, 40}, 10, dt), tall = Tensor::randn({40, 70}, 11, dt);
    compare([](const TL& x) { return matmul(slice(x[0], 1, 3, 20), slice(slice(x[1], 0, 1, 18), 1, 0, 70, 2)); },
            {wide, tall}, dt, "sliced operands");
    // an expanded (stride-0 batch) operand
    Tensor one = Tensor::randn({1, 17, 65}, 12, dt);
    compare([](const TL& x) { return matmul(x[0], expand(x[1], {5, 17, 65})); }, {a3, one}, dt, "expanded b");
  }
}

TEST(CudaLinear, MatchesCpuForwardAndBackward) {
  ZDL_REQUIRE_GPU();
  for (DType dt : kDtypes) {
    struct L {
      Shape x;
      int64_t out;
    };
    for (L l : {L{{1, 1}, 1}, L{{7, 3}, 5}, L{{4, 33, 65}, 129}, L{{1023, 17}, 7}, L{{2, 3, 64}, 96}}) {
      const int64_t in = l.x.back();
      Tensor x = Tensor::randn(l.x, 1, dt), w = Tensor::randn({l.out, in}, 2, dt), b = Tensor::randn({l.out}, 3, dt);
      std::string s = " x=" + shape_str(l.x) + " out=" + std::to_string(l.out);
      compare([](const TL& t) { return linear(t[0], t[1], t[2]); }, {x, w, b}, dt, "linear" + s);
      compare([](const TL& t) { return linear(t[0], t[1], Tensor()); }, {x, w}, dt, "linear no bias" + s);
      // weight as a transposed view, bias sliced out of a longer vector (unaligned: GEMM fallback)
      Tensor wt = Tensor::randn({in, l.out}, 4, dt), bb = Tensor::randn({l.out + 1}, 5, dt);
      compare([](const TL& t) { return linear(t[0], transpose(t[1], 0, 1), slice(t[2], 0, 1, t[2].size(0))); },
              {x, wt, bb}, dt, "linear(w^T view, sliced bias)" + s);
    }
  }
}

// [Note: GELU in the GEMM's epilogue]: the transformer MLP as one op against the CPU's three ops
// (linear, gelu, linear) in bf16, forward and all five gradients, on the GPT's aligned sizes (the
// epilogues must run: two more epilogue calls, forward and backward) and on odd ones (a hidden
// width whose leading dimension is no multiple of 8: the separate kernels); in f32 the op is the
// three ops on the GPU, bit for bit.
namespace {
int64_t gelu_epilogues() {
#ifdef ZDL_WITH_CUDA
  return kernels::cuda::gelu_epilogue_calls();
#else
  return 0;  // never reached: the test skips without a GPU
#endif
}
}  // namespace

TEST(CudaLinear, GeluMlpMatchesTheCpusThreeOps) {
  ZDL_REQUIRE_GPU();
  auto mlp = [](const TL& t) { return gelu_mlp(t[0], t[1], t[2], t[3], t[4]); };
  auto three = [](const TL& t) { return linear(gelu(linear(t[0], t[1], t[2])), t[3], t[4]); };
  struct M {
    Shape x;
    int64_t hidden;
    bool fused;
  };
  for (M m : {M{{2, 48, 64}, 256, true}, M{{96, 128}, 512, true}, M{{7, 24}, 36, false}}) {
    const int64_t C = m.x.back();
    const DType dt = DType::BF16;
    TL in = {Tensor::randn(m.x, 1, dt), Tensor::randn({m.hidden, C}, 2, dt, Device::cpu(), 0, 0.0, 0.1),
             Tensor::randn({m.hidden}, 3, dt, Device::cpu(), 0, 0.0, 0.1),
             Tensor::randn({C, m.hidden}, 4, dt, Device::cpu(), 0, 0.0, 0.1),
             Tensor::randn({C}, 5, dt, Device::cpu(), 0, 0.0, 0.1)};
    const std::string what = "gelu_mlp x=" + shape_str(m.x) + " hidden=" + std::to_string(m.hidden);
    const int64_t before = gelu_epilogues();
    OpRun gpu = run_op(mlp, in, Device::cuda());
    EXPECT_EQ(gelu_epilogues() - before, m.fused ? 2 : 0) << what;
    expect_close(gpu, run_op(three, in, Device::cpu()), tolerance(dt), what);
    TL in32;
    for (const Tensor& t : in) in32.push_back(t.to(DType::F32));
    expect_bit_equal(run_op(mlp, in32, Device::cuda()), run_op(three, in32, Device::cuda()), what + " f32");
  }
}

TEST(CudaMatmul, Deterministic) {
  ZDL_REQUIRE_GPU();
  for (DType dt : kDtypes) {
    Tensor x = Tensor::randn({4, 129, 257}, 1, dt), w = Tensor::randn({513, 257}, 2, dt), b = Tensor::randn({513}, 3, dt);
    OpFn f = [](const TL& t) { return linear(t[0], t[1], t[2]); };
    expect_bit_equal(run_op(f, {x, w, b}, Device::cuda()), run_op(f, {x, w, b}, Device::cuda()),
                     std::string("linear ") + dtype_name(dt));
    Tensor q = Tensor::randn({3, 65, 33}, 4, dt), k = Tensor::randn({3, 33, 129}, 5, dt);
    OpFn g = [](const TL& t) { return matmul(t[0], t[1]); };
    expect_bit_equal(run_op(g, {q, k}, Device::cuda()), run_op(g, {q, k}, Device::cuda()),
                     std::string("batched matmul ") + dtype_name(dt));
  }
}

TEST(CudaMatmul, ErrorsMatchCpu) {
  ZDL_REQUIRE_GPU();
  Tensor a = Tensor::zeros({3, 4}), b = Tensor::zeros({5, 6}), w = Tensor::zeros({6, 5}), bias = Tensor::zeros({7});
  auto g = [](const Tensor& t) { return t.to(Device::cuda()); };
  EXPECT_EQ(error_text([&] { matmul(g(a), g(b)); }), error_text([&] { matmul(a, b); }));
  EXPECT_EQ(error_text([&] { matmul(g(a), g(Tensor::zeros({2, 4, 6}))); }),
            error_text([&] { matmul(a, Tensor::zeros({2, 4, 6})); }));
  EXPECT_EQ(error_text([&] { linear(g(a), g(w), Tensor()); }), error_text([&] { linear(a, w, Tensor()); }));
  Tensor w2 = Tensor::zeros({6, 4});
  EXPECT_EQ(error_text([&] { linear(g(a), g(w2), g(bias)); }), error_text([&] { linear(a, w2, bias); }));
  // devices: both named
  std::string msg = error_text([&] { matmul(a, g(Tensor::zeros({4, 2}))); });
  EXPECT_NE(msg.find("cpu"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cuda:0"), std::string::npos) << msg;
  msg = error_text([&] { linear(g(a), w2, Tensor()); });
  EXPECT_NE(msg.find("cuda:0"), std::string::npos) << msg;
  // dtypes
  EXPECT_EQ(error_text([&] { matmul(g(a), g(Tensor::zeros({4, 2}, DType::BF16))); }),
            error_text([&] { matmul(a, Tensor::zeros({4, 2}, DType::BF16)); }));
  msg = error_text([&] { matmul(g(a.to(DType::F64)), g(Tensor::zeros({4, 2}, DType::F64))); });
  EXPECT_NE(msg.find("f64"), std::string::npos) << msg;
}

}  // namespace zdl

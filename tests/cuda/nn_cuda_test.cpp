// CUDA nn ops (gelu, layer_norm, softmax, embedding, cross_entropy, dropout) against the CPU
// ops on the same inputs: outputs and input gradients, f32 (relative 1e-5) and bf16 (1e-2),
// odd sizes, determinism (bit-equal runs), dropout's mask bit for bit, and the CPU's errors
// for bad ids/targets. Every test skips where no GPU is visible.
//
// bf16 references are the CPU ops on the same bf16 tensors (they compute in f32 and round
// once, as the CUDA kernels do), so the two sides differ by about one bf16 rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "core/deferred_read.h"
#include "core/rng.h"
#include "cuda_compare.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cuda/dropout.h"

namespace zdl {

using cuda_test::bytes_of;
using cuda_test::error_text;
using cuda_test::expect_bit_equal;
using cuda_test::expect_close;
using cuda_test::OpRun;
using cuda_test::rel_diff;
using cuda_test::run_op;
using cuda_test::tolerance;

namespace {

const Device kCpu = Device::cpu();

Device gpu() { return Device::cuda(); }

std::string name(DType dt) { return dtype_name(dt); }

// n ids in [0, V) from Philox (seeded), as an index tensor of `shape`.
Tensor random_ids(const Shape& shape, int64_t V, uint64_t seed, DType dt = DType::I64) {
  std::vector<int64_t> v(static_cast<size_t>(numel_of(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>(Philox::block(seed, 0, i)[0] % V);
  return Tensor::from_vector(v, shape, dt);
}

Tensor randn(const Shape& shape, uint64_t seed, DType dt, double stddev = 1.0, double mean = 0.0) {
  return Tensor::randn(shape, seed, dt, kCpu, 0, mean, stddev);
}

}  // namespace

// ---------------- gelu ----------------

TEST(CudaNn, GeluMatchesCpu) {
  ZDL_REQUIRE_GPU();
  auto f = [](const std::vector<Tensor>& in) { return gelu(in[0]); };
  for (DType dt : {DType::F32, DType::BF16})
    for (int64_t n : {1, 7, 4257, 100003}) {
      Tensor x = randn({n}, 1, dt, 3.0);  // covers the flat tails and the curved middle
      expect_close(run_op(f, {x}, gpu()), run_op(f, {x}, kCpu), tolerance(dt),
                   "gelu " + name(dt) + " n=" + std::to_string(n));
    }
  // From the second element on: the data is not 16-byte aligned, so the kernels take their
  // element-by-element path instead of 16-byte packs.
  auto shifted = [](const std::vector<Tensor>& in) { return gelu(slice(in[0], 0, 1, in[0].size(0))); };
  for (DType dt : {DType::F32, DType::BF16}) {
    Tensor x = randn({4099}, 2, dt, 3.0);
    expect_close(run_op(shifted, {x}, gpu()), run_op(shifted, {x}, kCpu), tolerance(dt), "gelu from element 1 " + name(dt));
  }
}

// ---------------- layer_norm ----------------

TEST(CudaNn, LayerNormMatchesCpu) {
  ZDL_REQUIRE_GPU();
  auto f = [](const std::vector<Tensor>& in) { return layer_norm(in[0], in[1], in[2], 1e-5); };
  for (DType dt : {DType::F32, DType::BF16})
    for (int64_t rows : {1, 7, 129})
      for (int64_t C : {1, 33, 768, 769}) {  // 768: rows of whole 16-byte packs (the packed kernels)
        // A non-zero mean exercises the two-pass statistics.
        Tensor x = randn({1, rows, C}, 2, dt, 2.0, 0.5);
        Tensor w = randn({C}, 3, dt, 1.0, 1.0), b = randn({C}, 4, dt);
        // C = 1: x - mean is 0, so dx is exactly 0 and both sides hold the residue of
        // rstd * w * dy terms (rstd = 1 / sqrt(1e-5) = 316; a fused multiply-add on the GPU
        // leaves up to ~1e-4 where the CPU's separate products cancel to 0).
        const double floor = C == 1 ? 1 / std::sqrt(1e-5) : 0;
        expect_close(run_op(f, {x, w, b}, gpu()), run_op(f, {x, w, b}, kCpu), tolerance(dt),
                     "layer_norm " + name(dt) + " rows=" + std::to_string(rows) + " C=" + std::to_string(C), floor);
      }
}

TEST(CudaNn, LayerNormWithoutAffineParametersMatchesCpu) {
  ZDL_REQUIRE_GPU();
  auto plain = [](const std::vector<Tensor>& in) { return layer_norm(in[0], Tensor(), Tensor(), 1e-5); };
  auto weight_only = [](const std::vector<Tensor>& in) { return layer_norm(in[0], in[1], Tensor(), 1e-3); };
  for (DType dt : {DType::F32, DType::BF16}) {
    for (int64_t C : {33, 64}) {
      Tensor x = randn({7, C}, 5, dt), w = randn({C}, 6, dt);
      expect_close(run_op(plain, {x}, gpu()), run_op(plain, {x}, kCpu), tolerance(dt),
                   "layer_norm plain " + name(dt) + " C=" + std::to_string(C));
      expect_close(run_op(weight_only, {x, w}, gpu()), run_op(weight_only, {x, w}, kCpu), tolerance(dt),
                   "layer_norm weight only " + name(dt) + " C=" + std::to_string(C));
    }
  }
}

// The same rows from a 16-byte-aligned buffer (read in packs) and from one element further
// into a buffer (read element by element) give the same bits: which lane adds which element
// depends on C alone.
TEST(CudaNn, LayerNormGivesTheSameBitsAlignedOrNot) {
  ZDL_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::BF16})
    for (int64_t C : {64, 768}) {
      const int64_t rows = 37, n = rows * C;
      auto shifted = [=](const std::vector<Tensor>& in) {
        return layer_norm(reshape(slice(in[0], 0, 1, n + 1), {rows, C}), in[1], in[2], 1e-5);
      };
      auto fresh = [=](const std::vector<Tensor>& in) {  // mul by 1: an aligned copy, exact both ways
        return layer_norm(reshape(mul(slice(in[0], 0, 1, n + 1), 1.0), {rows, C}), in[1], in[2], 1e-5);
      };
      Tensor x = randn({n + 1}, 10, dt, 2.0, 0.5), w = randn({C}, 11, dt, 1.0, 1.0), b = randn({C}, 12, dt);
      expect_bit_equal(run_op(shifted, {x, w, b}, gpu()), run_op(fresh, {x, w, b}, gpu()),
                       "layer_norm " + name(dt) + " C=" + std::to_string(C) + " from element 1 vs aligned");
    }
}

TEST(CudaNn, LayerNormBackwardIsDeterministic) {
  ZDL_REQUIRE_GPU();
  // Enough rows for many row chunks in the dweight/dbias reduction.
  auto f = [](const std::vector<Tensor>& in) { return layer_norm(in[0], in[1], in[2], 1e-5); };
  for (DType dt : {DType::F32, DType::BF16})
    for (int64_t C : {768, 769}) {
      Tensor x = randn({4099, C}, 7, dt), w = randn({C}, 8, dt), b = randn({C}, 9, dt);
      expect_bit_equal(run_op(f, {x, w, b}, gpu()), run_op(f, {x, w, b}, gpu()),
                       "layer_norm " + name(dt) + " C=" + std::to_string(C));
    }
}

// ---------------- softmax ----------------

TEST(CudaNn, SoftmaxMatchesCpu) {
  ZDL_REQUIRE_GPU();
  auto f = [](const std::vector<Tensor>& in) { return softmax(in[0], -1); };
  for (DType dt : {DType::F32, DType::BF16}) {
    for (int64_t rows : {1, 7, 129})
      for (int64_t C : {1, 33, 769, 1025}) {  // 1025: the block-per-row kernel
        Tensor x = randn({rows, C}, 10, dt, 3.0);
        expect_close(run_op(f, {x}, gpu()), run_op(f, {x}, kCpu), tolerance(dt),
                     "softmax " + name(dt) + " rows=" + std::to_string(rows) + " C=" + std::to_string(C));
      }
    Tensor wide = randn({3, 50304}, 11, dt, 3.0);
    expect_close(run_op(f, {wide}, gpu()), run_op(f, {wide}, kCpu), tolerance(dt), "softmax " + name(dt) + " C=50304");
  }
}

TEST(CudaNn, SoftmaxIsDeterministic) {
  ZDL_REQUIRE_GPU();
  auto f = [](const std::vector<Tensor>& in) { return softmax(in[0], -1); };
  for (int64_t C : {769, 50304}) {
    Tensor x = randn({65, C}, 12, DType::F32, 3.0);
    expect_bit_equal(run_op(f, {x}, gpu()), run_op(f, {x}, gpu()), "softmax C=" + std::to_string(C));
  }
}

// ---------------- embedding ----------------

TEST(CudaNn, EmbeddingMatchesCpuBitForBit) {
  ZDL_REQUIRE_GPU();
  // The CUDA backward sums each id's rows in position order in f32, the CPU twin's order, so
  // f32 gradients are bit-identical; bf16 ones too (both round the same f32 sum once).
  auto f = [](const std::vector<Tensor>& in) { return embedding(in[0], in[1]); };
  for (DType dt : {DType::F32, DType::BF16})
    for (DType it : {DType::I32, DType::I64})
      for (int64_t V : {1, 257})
        for (int64_t C : {1, 33, 769})
          for (Shape ids_shape : {Shape{1}, Shape{7}, Shape{3, 43}}) {
            Tensor w = randn({V, C}, 13, dt);
            Tensor ids = random_ids(ids_shape, V, 14, it);
            std::string what = "embedding " + name(dt) + " " + name(it) + " V=" + std::to_string(V) +
                               " C=" + std::to_string(C) + " ids=" + shape_str(ids_shape);
            OpRun g = run_op(f, {w, ids}, gpu()), c = run_op(f, {w, ids}, kCpu);
            expect_close(g, c, tolerance(dt), what);
            expect_bit_equal(g, c, what);
          }
}

TEST(CudaNn, EmbeddingBackwardIsDeterministicWithRepeatedIds) {
  ZDL_REQUIRE_GPU();
  // 20000 lookups of 7 rows: long runs of the same id (the hot-token case).
  auto f = [](const std::vector<Tensor>& in) { return embedding(in[0], in[1]); };
  Tensor w = randn({7, 65}, 15, DType::F32);
  Tensor ids = random_ids({4, 5000}, 7, 16);
  OpRun a = run_op(f, {w, ids}, gpu()), b = run_op(f, {w, ids}, gpu());
  expect_bit_equal(a, b, "embedding twice on the GPU");
  expect_bit_equal(a, run_op(f, {w, ids}, kCpu), "embedding GPU vs CPU");
}

TEST(CudaNn, EmbeddingBadIdGivesTheCpuError) {
  ZDL_REQUIRE_GPU();
  Tensor w = randn({257, 33}, 17, DType::F32);
  Tensor wg = w.to(gpu());
  for (DType it : {DType::I32, DType::I64})
    for (std::vector<int64_t> v : {std::vector<int64_t>{0, 3, 300, 2, -1}, std::vector<int64_t>{-1, 5, 257},
                                   std::vector<int64_t>{4, 2, 1, 257}}) {
      Tensor ids = Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, it);
      std::string cpu = error_text([&] { embedding(w, ids); });
      // The check is judged at the next host wait ([Note: reads the host takes later]).
      std::string cuda = error_text([&] {
        embedding(wg, ids.to(gpu()));
        synchronize(gpu());
      });
      EXPECT_FALSE(cpu.empty());
      EXPECT_EQ(cuda, cpu);
    }
  // Ids on another device than the weight: the message names both devices.
  std::string msg = error_text([&] { embedding(wg, random_ids({3}, 257, 1)); });
  EXPECT_NE(msg.find("cuda:0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cpu"), std::string::npos) << msg;
}

// The id and target checks wait for nothing: a forward and backward through embedding and
// cross_entropy make no host wait; a bad id reads nothing (its row is zero, checked by the
// memcheck run too) and fails the first wait after it, item() here, with the CPU's message,
// once; the next wait is clean; a loop without waits gets the error within 64 ops.
TEST(CudaNn, IdChecksAreJudgedAtTheNextHostWait) {
  ZDL_REQUIRE_GPU();
  Tensor w = randn({257, 33}, 17, DType::F32).to(gpu());
  w.set_requires_grad(true);
  Tensor good = random_ids({2, 5}, 257, 3).to(gpu());
  Tensor targets = random_ids({10}, 257, 4).to(gpu());
  synchronize(gpu());
  const int64_t waits = cuda_host_waits();
  Tensor loss = cross_entropy(matmul(reshape(embedding(w, good), {10, 33}), transpose(w, 0, 1)), targets, -1);
  loss.backward();
  EXPECT_EQ(cuda_host_waits(), waits);
  EXPECT_TRUE(std::isfinite(loss.item()));
  EXPECT_EQ(cuda_host_waits(), waits + 1);

  Tensor bad = Tensor::from_vector(std::vector<int64_t>{4, 999, 7, -2}, {4}, DType::I64);
  const std::string cpu = error_text([&] { embedding(w.detach().to(kCpu), bad); });
  Tensor out = embedding(w.detach(), bad.to(gpu()));
  const std::string cuda = error_text([&] { sum(out).item(); });
  EXPECT_EQ(cuda, cpu);
  std::vector<double> rows = out.to_vector();  // the check was judged once: this wait is clean
  for (int64_t c = 0; c < 33; ++c) {
    EXPECT_EQ(rows[static_cast<size_t>(33 + c)], 0.0);
    EXPECT_EQ(rows[static_cast<size_t>(3 * 33 + c)], 0.0);
  }
  // A loop that never waits still hears of a bad id: past 64 queued checks, one waits for them.
  const std::string looped = error_text([&] {
    embedding(w.detach(), bad.to(gpu()));
    for (int i = 0; i < 70; ++i) embedding(w.detach(), good);
  });
  EXPECT_EQ(looped, cpu);
}

// ---------------- cross_entropy ----------------

TEST(CudaNn, CrossEntropyMatchesCpu) {
  ZDL_REQUIRE_GPU();
  // f32 at 1e-5 also for V = 50304: the kernels add the exponentials in f64 (as the CPU twin),
  // so lse carries f32 rounding only.
  for (DType dt : {DType::F32, DType::BF16})
    for (DType it : {DType::I32, DType::I64})
      for (int64_t ignore : {-1, -100})
        for (int64_t N : {1, 7, 129})
          for (int64_t V : {1, 257, 50304}) {
            if (V == 50304 && (it == DType::I32 || ignore == -100)) continue;  // keep the CPU side quick
            Tensor logits = randn({N, V}, 18, dt, 2.0);
            std::vector<int64_t> t = random_ids({N}, V, 19).to_int_vector();
            for (int64_t n = 2; n < N; n += 3) t[static_cast<size_t>(n)] = ignore;  // some ignored rows
            Tensor targets = Tensor::from_vector(t, {N}, it);
            auto f = [ignore](const std::vector<Tensor>& in) { return cross_entropy(in[0], in[1], ignore); };
            expect_close(run_op(f, {logits, targets}, gpu()), run_op(f, {logits, targets}, kCpu), tolerance(dt),
                         "cross_entropy " + name(dt) + " " + name(it) + " ignore=" + std::to_string(ignore) +
                             " N=" + std::to_string(N) + " V=" + std::to_string(V));
          }
}

// GPT's head: the classes are the first V columns of rows padded to 50304, and the gradient is
// written over the (dead) logits: a zero gradient in the padding, the CPU twin's values.
TEST(CudaNn, CrossEntropyOnPaddedRowsWritesTheGradientInPlace) {
  ZDL_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::BF16})
    for (auto [V, ld] : std::vector<std::pair<int64_t, int64_t>>{{50257, 50304}, {250, 257}}) {
      Tensor logits = randn({65, ld}, 24, dt, 2.0);
      std::vector<int64_t> t = random_ids({65}, V, 25).to_int_vector();
      t[3] = -1;
      Tensor targets = Tensor::from_vector(t, {65}, DType::I64);
      auto f = [classes = V](const std::vector<Tensor>& in) {
        return cross_entropy(mul(in[0], 1.0), in[1], -1, classes);
      };
      OpRun g = run_op(f, {logits, targets}, gpu());
      expect_close(g, run_op(f, {logits, targets}, kCpu), tolerance(dt),
                   "padded cross_entropy " + name(dt) + " V=" + std::to_string(V));
      std::vector<double> grad = g.grads[0].to_vector();
      for (int64_t n = 0; n < 65; ++n)
        for (int64_t v = V; v < ld; ++v) ASSERT_EQ(grad[static_cast<size_t>(n * ld + v)], 0.0) << n << ", " << v;
    }
}

// Logits rows from an aligned buffer (16-byte packs) and from one element further (element by
// element) give the same bits; -inf logits (a masked vocabulary) add nothing, on both paths and
// on the CPU.
TEST(CudaNn, CrossEntropyGivesTheSameBitsAlignedOrNotWithInfiniteLogits) {
  ZDL_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::BF16})
    for (int64_t V : {1000, 50304}) {
      const int64_t N = 33, n = N * V;
      std::vector<double> v = randn({n + 1}, 26, DType::F32, 2.0).to_vector();
      std::vector<int64_t> t = random_ids({N}, V, 27).to_int_vector();
      for (int64_t r = 0; r < N; ++r)
        for (int64_t c = r % 5; c < V; c += 7)  // every 7th logit masked, never the target
          if (c != t[static_cast<size_t>(r)]) v[static_cast<size_t>(1 + r * V + c)] = -INFINITY;
      Tensor logits = Tensor::from_vector(v, {n + 1}, dt);
      Tensor targets = Tensor::from_vector(t, {N}, DType::I64);
      auto shifted = [=](const std::vector<Tensor>& in) {
        return cross_entropy(reshape(slice(in[0], 0, 1, n + 1), {N, V}), in[1], -1);
      };
      auto fresh = [=](const std::vector<Tensor>& in) {
        return cross_entropy(reshape(mul(slice(in[0], 0, 1, n + 1), 1.0), {N, V}), in[1], -1);
      };
      const std::string what = "cross_entropy " + name(dt) + " V=" + std::to_string(V);
      OpRun a = run_op(shifted, {logits, targets}, gpu());
      expect_bit_equal(a, run_op(fresh, {logits, targets}, gpu()), what + " from element 1 vs aligned");
      EXPECT_TRUE(std::isfinite(a.out.item())) << what;
      expect_close(a, run_op(shifted, {logits, targets}, kCpu), tolerance(dt), what + " against the CPU");
    }
}

// A padded vocabulary (V of ld columns, so every row's last group of W is short) from an aligned
// buffer (packs) and from one element further (element by element): the same bits.
TEST(CudaNn, CrossEntropyOnPaddedRowsGivesTheSameBitsAlignedOrNot) {
  ZDL_REQUIRE_GPU();
  const int64_t N = 17, V = 50257, ld = 50304, n = N * ld;
  for (DType dt : {DType::F32, DType::BF16}) {
    Tensor logits = randn({n + 1}, 28, dt, 2.0);
    std::vector<int64_t> t = random_ids({N}, V, 29).to_int_vector();
    t[5] = -1;
    Tensor targets = Tensor::from_vector(t, {N}, DType::I64);
    auto shifted = [=](const std::vector<Tensor>& in) {
      return cross_entropy(reshape(slice(in[0], 0, 1, n + 1), {N, ld}), in[1], -1, V);
    };
    auto fresh = [=](const std::vector<Tensor>& in) {
      return cross_entropy(reshape(mul(slice(in[0], 0, 1, n + 1), 1.0), {N, ld}), in[1], -1, V);
    };
    const std::string what = "padded cross_entropy " + name(dt);
    OpRun a = run_op(shifted, {logits, targets}, gpu());
    expect_bit_equal(a, run_op(fresh, {logits, targets}, gpu()), what + " from element 1 vs aligned");
    expect_close(a, run_op(shifted, {logits, targets}, kCpu), tolerance(dt), what + " against the CPU");
  }
}

// One NaN or +inf logit in a row makes the loss NaN, on both GPU paths as on the CPU (the online
// max must not hide it).
TEST(CudaNn, CrossEntropyWithANanOrInfiniteLogitIsNan) {
  ZDL_REQUIRE_GPU();
  const int64_t N = 4, V = 1000, n = N * V;
  for (DType dt : {DType::F32, DType::BF16})
    for (double bad : {std::nan(""), static_cast<double>(INFINITY)}) {
      std::vector<double> v = randn({n + 1}, 30, DType::F32, 2.0).to_vector();
      v[static_cast<size_t>(1 + 2 * V + 17)] = bad;  // row 2, never its target (below)
      std::vector<int64_t> t = {3, 900, 18, 5};
      Tensor logits = Tensor::from_vector(v, {n + 1}, dt), targets = Tensor::from_vector(t, {N}, DType::I64);
      auto shifted = [=](const std::vector<Tensor>& in) {
        return cross_entropy(reshape(slice(in[0], 0, 1, n + 1), {N, V}), in[1], -1);
      };
      auto fresh = [=](const std::vector<Tensor>& in) {
        return cross_entropy(reshape(mul(slice(in[0], 0, 1, n + 1), 1.0), {N, V}), in[1], -1);
      };
      const std::string what = name(dt) + (std::isnan(bad) ? " NaN" : " +inf");
      EXPECT_TRUE(std::isnan(run_op(shifted, {logits, targets}, kCpu).out.item())) << what << " on the CPU";
      EXPECT_TRUE(std::isnan(run_op(shifted, {logits, targets}, gpu()).out.item())) << what << " from element 1";
      EXPECT_TRUE(std::isnan(run_op(fresh, {logits, targets}, gpu()).out.item())) << what << " aligned";
    }
}

TEST(CudaNn, CrossEntropyAllIgnoredIsZero) {
  ZDL_REQUIRE_GPU();
  auto f = [](const std::vector<Tensor>& in) { return cross_entropy(in[0], in[1], -1); };
  Tensor logits = randn({5, 257}, 20, DType::F32);
  Tensor targets = Tensor::from_vector(std::vector<int64_t>(5, -1), {5}, DType::I64);
  OpRun g = run_op(f, {logits, targets}, gpu());
  EXPECT_EQ(g.out.item(), 0.0);
  for (double v : g.grads[0].to_vector()) ASSERT_EQ(v, 0.0);
  expect_bit_equal(g, run_op(f, {logits, targets}, kCpu), "all ignored");
}

TEST(CudaNn, CrossEntropyBadTargetGivesTheCpuError) {
  ZDL_REQUIRE_GPU();
  Tensor logits = randn({6, 257}, 21, DType::F32);
  Tensor lg = logits.to(gpu());
  for (DType it : {DType::I32, DType::I64})
    for (std::vector<int64_t> v : {std::vector<int64_t>{0, -1, 5, 257, 3, -7}, std::vector<int64_t>{-1, -2, 0, 1, 2, 3},
                                   std::vector<int64_t>{1, 2, 3, 4, 5, 1000}}) {
      Tensor targets = Tensor::from_vector(v, {6}, it);
      std::string cpu = error_text([&] { cross_entropy(logits, targets, -1); });
      std::string cuda = error_text([&] {
        cross_entropy(lg, targets.to(gpu()), -1);
        synchronize(gpu());
      });
      EXPECT_FALSE(cpu.empty());
      EXPECT_EQ(cuda, cpu);
    }
  Tensor cpu_targets = Tensor::from_vector(std::vector<int64_t>(6, 0), {6}, DType::I64);
  std::string msg = error_text([&] { cross_entropy(lg, cpu_targets, -1); });
  EXPECT_NE(msg.find("cuda:0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cpu"), std::string::npos) << msg;
}

TEST(CudaNn, CrossEntropyIsDeterministic) {
  ZDL_REQUIRE_GPU();
  auto f = [](const std::vector<Tensor>& in) { return cross_entropy(in[0], in[1], -1); };
  for (DType dt : {DType::F32, DType::BF16}) {
    Tensor logits = randn({257, 50304}, 22, dt, 2.0);
    Tensor targets = random_ids({257}, 50304, 23);
    expect_bit_equal(run_op(f, {logits, targets}, gpu()), run_op(f, {logits, targets}, gpu()),
                     "cross_entropy " + name(dt));
  }
}

// ---------------- dropout ----------------

TEST(CudaNn, DropoutMatchesCpuBitForBit) {
  ZDL_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::BF16})
    for (double p : {0.1, 0.5, 0.9, 1.0 / 3.0})
      for (int64_t n : {1, 7, 100003}) {
        auto f = [p](const std::vector<Tensor>& in) { return dropout(in[0], p, true, 42, 7); };
        Tensor x = randn({n}, 24, dt);
        std::string what = "dropout " + name(dt) + " p=" + std::to_string(p) + " n=" + std::to_string(n);
        OpRun g = run_op(f, {x}, gpu());
        expect_bit_equal(g, run_op(f, {x}, kCpu), what);
        if (n == 100003) {  // the mask is not trivial: about p of the elements are dropped
          int64_t zeros = 0;
          for (double v : g.out.to_vector()) zeros += v == 0.0;
          EXPECT_NEAR(static_cast<double>(zeros) / static_cast<double>(n), p, 0.01) << what;
        }
      }
}

#ifdef ZDL_WITH_CUDA  // calls a kernel entry point directly: only in CUDA builds
TEST(CudaNn, DropoutKernelSliceEqualsTheWholeTensorsSlice) {
  ZDL_REQUIRE_GPU();
  // kernels/cuda/dropout.h with an offset: the mask of elements [off, off + m) of a tensor,
  // bit-identical to the CPU twin with the same offset.
  const int64_t off = 1000003, m = 4097;
  Tensor x = randn({m}, 25, DType::F32);
  Tensor xg = x.to(gpu()), outg = Tensor::empty({m}, DType::F32, gpu());
  kernels::cuda::dropout_forward(DType::F32, m, xg.raw_data(), 0.3, 5, 6, outg.raw_data(), off);
  Tensor out = Tensor::empty({m}, DType::F32);
  kernels::cpu::dropout_forward<float>(m, x.data<float>(), 0.3, 5, 6, out.data<float>(), off);
  EXPECT_TRUE(bytes_of(outg) == bytes_of(out));
}
#endif

// ---------------- errors ----------------

TEST(CudaNn, UnsupportedDtypesAndMixedDevicesThrow) {
  ZDL_REQUIRE_GPU();
  Tensor x64 = randn({3, 4}, 26, DType::F64).to(gpu());
  std::string msg = error_text([&] { gelu(x64); });
  EXPECT_NE(msg.find("f64"), std::string::npos) << msg;
  EXPECT_NE(msg.find("CUDA"), std::string::npos) << msg;
  // layer_norm with x on the GPU and its weight on the CPU names both devices.
  Tensor x = randn({3, 4}, 27, DType::F32).to(gpu());
  msg = error_text([&] { layer_norm(x, randn({4}, 28, DType::F32), Tensor()); });
  EXPECT_NE(msg.find("cuda:0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cpu"), std::string::npos) << msg;
}

}  // namespace zdl

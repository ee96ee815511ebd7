// ZeRO on GPUs at N ranks (run under mpirun for N = 2 and 4 by the ctest entries dist_cuda_mpi_np*,
// label gpu; dist_mpi_np* leave these tests out):
// every stage's losses and parameters equal those of one process training stage 0 on the whole
// batch on the GPU; bf16 within bf16 accuracy; a NaN gradient on one rank is seen by all. On a
// machine with one GPU all ranks share it, which NCCL refuses: dist::init's automatic choice must
// then be MPI with host staging (checked), and backend nccl a clear error. On a box with a GPU
// per rank the same tests run over NCCL. Skips (on every rank alike) where no GPU is visible.
#include <gtest/gtest.h>

#include "../offload_cases.h"
#include "../zero_harness.h"
#include "dist/comm/local_communicator.h"
#include "mpi_test_env.h"

namespace zdl::dist::testing {

namespace {

#define ZDL_REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device (or CPU-only build)"

const ZeroStage kGpuStages[] = {ZeroStage::DDP, ZeroStage::One, ZeroStage::Two, ZeroStage::Three};

// True when some rank shares its GPU with another (collective over the world communicator).
bool ranks_share_a_gpu() {
  const std::vector<int64_t> over = world().all_gather_i64(world().local_rank() >= cuda_device_count() ? 1 : 0);
  for (int64_t o : over)
    if (o) return true;
  return false;
}

void expect_matches(Communicator& comm, const RunResult& got, const RunResult& ref, double loss_tol, double param_tol,
                    const std::string& what) {
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  for (size_t s = 0; s < ref.losses.size(); ++s)
    EXPECT_LE(std::abs(got.losses[s] - ref.losses[s]), loss_tol * std::abs(ref.losses[s]))
        << comm.prefix() << " " << what << " step " << s + 1 << ": " << got.losses[s] << " vs " << ref.losses[s];
  EXPECT_EQ(got.params.size(), ref.params.size()) << comm.prefix() << " " << what;
  for (auto& [name, v] : ref.params) {
    auto it = got.params.find(name);
    if (it == got.params.end()) {
      ADD_FAILURE() << comm.prefix() << " " << what << ": no parameter " << name;
      continue;
    }
    EXPECT_LE(rel_l2(it->second, v), param_tol) << comm.prefix() << " " << what << " " << name;
  }
}

}  // namespace

// The backend dist::init picks for CUDA tensors: NCCL when every rank has a GPU of its own, MPI
// (host staging) when ranks share one; asking for NCCL on a shared GPU is a clear error.
TEST(ZeroCudaMpi, InitChoosesMpiStagingWhenRanksShareAGpu) {
  ZDL_REQUIRE_GPU();
  const bool shared = ranks_share_a_gpu();
  auto comm = init({.device = Device::cuda()});
  EXPECT_EQ(comm->backend(), shared ? "mpi" : "nccl") << comm->prefix();
  EXPECT_TRUE(comm->device().is_cuda());
  EXPECT_EQ(comm->device().index, world().local_rank() % cuda_device_count());
  EXPECT_EQ(comm->size(), world().size());
  if (shared) {
    try {
      init({.device = Device::cuda(), .backend = "nccl"});
      ADD_FAILURE() << comm->prefix() << " backend nccl on a shared GPU did not fail";
    } catch (const Error& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("one GPU per rank"), std::string::npos) << m;
    }
  }
}

// k steps at N ranks with B/N rows each on the GPU == one process, stage 0, B rows on the GPU.
// f32 sums run in another order (per-rank GEMMs over B/N rows, then the reduction), so the
// losses agree to 1e-5 and the parameters to 1e-4 (relative L2; Adam amplifies last-bit
// differences of tiny gradients, and cuBLAS may choose another algorithm for B/N rows than for B).
TEST(ZeroCudaMpi, EveryStageOnTheGpuMatchesOneProcess) {
  ZDL_REQUIRE_GPU();
  auto comm = init({.device = Device::cuda()});  // NCCL with a GPU per rank, else MPI staging
  auto local = std::make_shared<LocalCommunicator>(comm->device());
  RunConfig c{.stage = ZeroStage::DDP, .grad_accum = 2, .device = comm->device()};
  RunResult ref = run_zero(*local, c);
  for (ZeroStage s : kGpuStages) {
    c.stage = s;
    RunResult got = run_zero(*comm, c);
    expect_matches(*comm, got, ref, 1e-5, 1e-4, std::string("gpu f32 ") + stage_name(s));
  }
}

// Optimizer offload to cpu on the GPU ranks: the host's update gives the bits of the GPU's, at
// every stage (the collectives are the same on both runs).
TEST(ZeroCudaMpi, HostTierGivesTheBitsOfTheRunWithout) {
  ZDL_REQUIRE_GPU();
  auto comm = init({.device = Device::cuda()});
  expect_host_tier_bit_identical(*comm, comm->device());
}

TEST(ZeroCudaMpi, Bf16OnTheGpuTracksOneProcess) {
  ZDL_REQUIRE_GPU();
  auto comm = init({.device = Device::cuda()});
  auto local = std::make_shared<LocalCommunicator>(comm->device());
  RunConfig c{.stage = ZeroStage::DDP, .dtype = DType::BF16, .device = comm->device()};
  RunResult ref = run_zero(*local, c);
  const Bf16Prediction p = bf16_prediction(c, comm->size());
  for (ZeroStage s : {ZeroStage::DDP, ZeroStage::Three}) {
    c.stage = s;
    RunResult got = run_zero(*comm, c);
    for (size_t i = 0; i < ref.losses.size(); ++i)
      EXPECT_NEAR(got.losses[i], ref.losses[i], 1e-2 * std::abs(ref.losses[i]))
          << comm->prefix() << " gpu bf16 " << stage_name(s) << " step " << i + 1;
    expect_within_bf16_prediction(got, p, detail::str(comm->prefix(), " gpu bf16 ", stage_name(s)));
  }
}

// A NaN put into one gradient on the last rank before any reduction: every rank sees the
// non-finite norm, names unit h.1, and skips the step (as on the CPU, see zero_cases.h).
TEST(ZeroCudaMpi, NonFiniteGradientOnOneRankIsSeenByAll) {
  ZDL_REQUIRE_GPU();
  auto comm = init({.device = Device::cuda()});
  for (ZeroStage s : {ZeroStage::DDP, ZeroStage::Two, ZeroStage::Three}) {
    RunConfig c{.stage = s, .poison_step = 1, .device = comm->device()};
    RunResult got = run_zero(*comm, c);
    ASSERT_EQ(got.nonfinite.size(), static_cast<size_t>(c.steps));
    for (int step = 0; step < c.steps; ++step) {
      EXPECT_EQ(got.nonfinite[step].size(), step == c.poison_step ? 1u : 0u) << comm->prefix() << " " << stage_name(s);
      if (step != c.poison_step || got.nonfinite[step].empty()) continue;
      EXPECT_EQ(got.nonfinite[step][0].name, "h.1") << comm->prefix();
      EXPECT_EQ(got.nonfinite[step][0].ranks, s == ZeroStage::DDP ? comm->size() : 1) << comm->prefix();
    }
  }
}

}  // namespace zdl::dist::testing

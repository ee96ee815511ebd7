// NCCL backend with one rank (no launcher needed; NCCL refuses two ranks on one GPU): every
// collective completes on CUDA tensors of every dtype, a result is visible after wait() (the
// compute stream waits for NCCL's), and the ledger records the calls. Over one rank a sum is
// the identity: the sums are checked with several ranks over MPI (tests/dist/mpi/). Skips
// without a GPU, in a CPU-only build or a build without NCCL.
#include <gtest/gtest.h>

#include "dist/comm/communicator.h"

namespace zdl::dist {

#define ZDL_REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device (or CPU-only build)"
#ifdef ZDL_WITH_NCCL
#define ZDL_REQUIRE_NCCL() ZDL_REQUIRE_GPU()
#else
#define ZDL_REQUIRE_NCCL() GTEST_SKIP() << "this build has no NCCL"
#endif

TEST(NcclCommunicator, OneRankCollectivesOnTheGpu) {
  ZDL_REQUIRE_NCCL();
  if (launched_by_mpi()) GTEST_SKIP() << "one-rank test; run without mpirun";
  auto comm = init({.device = Device::cuda(), .backend = "nccl"});
  ASSERT_EQ(comm->backend(), "nccl");
  ASSERT_EQ(comm->size(), 1);
  comm_ledger().reset();
  for (DType dt : {DType::F32, DType::BF16, DType::I64, DType::F64}) {
    Tensor host = Tensor::from_vector(std::vector<double>{1, 2, 3, 4, 5}, {5}, dt);
    Tensor t = host.to(Device::cuda());
    comm->all_reduce(t);
    EXPECT_EQ(t.to(Device::cpu()).to_vector(), host.to_vector()) << dtype_name(dt);
    Tensor out = Tensor::zeros({5}, dt, Device::cuda());
    auto w = comm->all_gather_async(t, out);
    w->wait();
    EXPECT_EQ(out.to(Device::cpu()).to_vector(), host.to_vector()) << dtype_name(dt);
    Tensor rs = Tensor::zeros({5}, dt, Device::cuda());
    comm->reduce_scatter(t, rs);
    EXPECT_EQ(rs.to(Device::cpu()).to_vector(), host.to_vector()) << dtype_name(dt);
    comm->broadcast(t, 0);
    EXPECT_EQ(t.to(Device::cpu()).to_vector(), host.to_vector()) << dtype_name(dt);
  }
  EXPECT_EQ(comm_ledger().stats(CollectiveKind::AllGather, CommPhase::Other).calls, 4);
  EXPECT_EQ(comm_ledger().stats(CollectiveKind::AllGather, CommPhase::Other).payload_bytes, 5 * (4 + 2 + 8 + 8));
  EXPECT_EQ(comm_ledger().total().wire_bytes, 0);
  EXPECT_EQ(comm->all_reduce_sum(1.5), 1.5);
  comm->barrier();
  // CPU tensors are not NCCL's.
  EXPECT_THROW(comm->all_reduce(Tensor::zeros({3})), Error);
  comm_ledger().reset();
}

TEST(NcclCommunicator, LocalBackendAcceptsGpuTensors) {
  ZDL_REQUIRE_GPU();
  if (launched_by_mpi()) GTEST_SKIP() << "one-rank test; run without mpirun";
  auto comm = init({.device = Device::cuda()});
  EXPECT_EQ(comm->backend(), "local");
  Tensor t = Tensor::arange(7).to(Device::cuda());
  Tensor out = Tensor::zeros({7}, DType::F32, Device::cuda());
  comm->all_gather(t, out);
  EXPECT_EQ(out.to(Device::cpu()).to_vector(), Tensor::arange(7).to_vector());
}

}  // namespace zdl::dist

// The MPI backend without a launcher: an MPI singleton of size 1 (what `init({.backend = "mpi"})`
// gives outside mpirun). Checks that it starts without a launcher and that its calls complete
// through the communication thread and are recorded; over one rank a sum is the identity, so
// the sums themselves (bf16 included) are checked at N = 2, 4 and 8 in tests/dist/mpi/.
#include <gtest/gtest.h>

#include "dist/comm/communicator.h"
#include "dist/comm/mpi_communicator.h"

namespace zdl::dist {

TEST(MpiSingleton, OneRankWithoutLauncher) {
  if (launched_by_mpi()) GTEST_SKIP() << "running under an MPI launcher";
  auto comm = init({.backend = "mpi"});
  ASSERT_EQ(comm->backend(), "mpi");
  ASSERT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->prefix(), "[rank 0/1]");
  comm_ledger().reset();
  Tensor t = Tensor::from_vector(std::vector<double>{1.5, -2, 3}, {3}, DType::BF16);
  comm->all_reduce(t);
  EXPECT_EQ(t.to_vector(), (std::vector<double>{1.5, -2, 3}));
  Tensor full = Tensor::zeros({3}, DType::BF16);
  auto w = comm->all_gather_async(t, full);
  w->wait();
  EXPECT_EQ(full.to_vector(), (std::vector<double>{1.5, -2, 3}));
  EXPECT_EQ(comm->all_reduce_sum(0.25), 0.25);
  EXPECT_EQ(comm->all_gather_i64(-5), (std::vector<int64_t>{-5}));
  comm->barrier();
  EXPECT_EQ(comm_ledger().total().calls, 3);
  EXPECT_EQ(comm_ledger().total().wire_bytes, 0);
  comm_ledger().reset();
}

}  // namespace zdl::dist

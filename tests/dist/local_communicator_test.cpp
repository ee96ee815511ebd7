// LocalCommunicator (world size 1): collectives are copies, checked like the real backends and
// recorded in the ledger with wire bytes 0. Also init(), launched_by_mpi() and the timeout
// setting, which need no launcher.
#include "dist/comm/local_communicator.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "dist/comm/communicator.h"
#include "error_of.h"

namespace zdl::dist {

namespace {

// Sets (or unsets) an environment variable for the scope, restoring the previous value.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

using ::zdl::testing::error_of;

Tensor block_of(const Tensor& full, int64_t block, int64_t n) {
  return Tensor::from_storage(full.storage(), {n}, {1}, full.offset() + block * n, full.dtype());
}

}  // namespace

TEST(LocalCommunicator, InitWithoutLauncherIsLocal) {
  if (launched_by_mpi()) GTEST_SKIP() << "running under an MPI launcher";
  auto comm = init();
  EXPECT_EQ(comm->backend(), "local");
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->local_rank(), 0);
  EXPECT_EQ(comm->prefix(), "[rank 0/1]");
  EXPECT_TRUE(comm->device().is_cpu());
}

TEST(LocalCommunicator, InitRejectsUnknownBackendAndMissingNccl) {
  EXPECT_NE(error_of([] { init({.backend = "gloo"}); }).find("unknown backend 'gloo'"), std::string::npos);
#ifndef ZDL_WITH_NCCL
  EXPECT_NE(error_of([] { init({.backend = "nccl"}); }).find("this zerodl build has no NCCL"), std::string::npos);
#endif
#ifndef ZDL_WITH_CUDA
  EXPECT_THROW(init({.device = Device::cuda()}), Error);
#endif
}

TEST(LocalCommunicator, LaunchedByMpiReadsTheLauncherEnvironment) {
  // Clear what a launcher would set, then set one variable at a time.
  const char* vars[] = {"PMI_RANK", "PMI_SIZE", "PMIX_RANK", "PMI_FD", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                        "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "HYDI_CONTROL_FD", "HYDRA_CONTROL_FD"};
  std::vector<std::unique_ptr<ScopedEnv>> cleared;
  for (const char* v : vars) cleared.push_back(std::make_unique<ScopedEnv>(v, nullptr));
  if (launched_by_mpi()) GTEST_SKIP() << "another launcher variable is set in this environment";
  for (const char* v : {"PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALRANKID", "HYDRA_CONTROL_FD"}) {
    ScopedEnv e(v, "0");
    EXPECT_TRUE(launched_by_mpi()) << v;
  }
  EXPECT_FALSE(launched_by_mpi());
  // mpiexec's own settings, exported for the mpiexec calls of a shell, launch nothing: a plain
  // process stays one process (a launched one would run every collective through MPI).
  ScopedEnv launcher("HYDRA_LAUNCHER", "fork"), hosts("HYDRA_HOST_FILE", "/dev/null");
  EXPECT_FALSE(launched_by_mpi());
}

TEST(LocalCommunicator, TimeoutComesFromTheEnvironment) {
  {
    ScopedEnv e("ZDL_COLLECTIVE_TIMEOUT_S", nullptr);
    EXPECT_EQ(LocalCommunicator().timeout(), std::chrono::milliseconds(300000));
  }
  {
    ScopedEnv e("ZDL_COLLECTIVE_TIMEOUT_S", "0.5");
    EXPECT_EQ(LocalCommunicator().timeout(), std::chrono::milliseconds(500));
  }
  {
    ScopedEnv e("ZDL_COLLECTIVE_TIMEOUT_S", "soon");
    EXPECT_NE(error_of([] { LocalCommunicator c; }).find("ZDL_COLLECTIVE_TIMEOUT_S='soon'"), std::string::npos);
  }
  LocalCommunicator c;
  c.set_timeout(std::chrono::seconds(2));
  EXPECT_EQ(c.timeout(), std::chrono::milliseconds(2000));
}

TEST(LocalCommunicator, CollectivesAreCopies) {
  LocalCommunicator comm;
  Tensor t = Tensor::from_vector(std::vector<double>{1, 2, 3}, {3});
  comm.all_reduce(t);
  EXPECT_EQ(t.to_vector(), (std::vector<double>{1, 2, 3}));
  comm.broadcast(t, 0);
  EXPECT_EQ(t.to_vector(), (std::vector<double>{1, 2, 3}));

  Tensor out = Tensor::zeros({3});
  comm.all_gather(t, out);
  EXPECT_EQ(out.to_vector(), (std::vector<double>{1, 2, 3}));
  Tensor rs = Tensor::zeros({3}, DType::F32);
  comm.reduce_scatter(t, rs);
  EXPECT_EQ(rs.to_vector(), (std::vector<double>{1, 2, 3}));

  // Shapes may differ when the element counts agree (flat buffers vs. parameter views).
  Tensor grid = Tensor::zeros({1, 3});
  comm.all_gather(t, grid);
  EXPECT_EQ(grid.to_vector(), (std::vector<double>{1, 2, 3}));

  // In place: the input is the output's own (only) block.
  Tensor full = Tensor::from_vector(std::vector<double>{4, 5, 6}, {3}, DType::BF16);
  comm.all_gather(block_of(full, 0, 3), full);
  EXPECT_EQ(full.to_vector(), (std::vector<double>{4, 5, 6}));

  Tensor a2a = Tensor::zeros({3});
  comm.all_to_all_async(t, a2a)->wait();
  EXPECT_EQ(a2a.to_vector(), (std::vector<double>{1, 2, 3}));

  EXPECT_EQ(comm.all_gather_i64(42), (std::vector<int64_t>{42}));
  EXPECT_EQ(comm.all_reduce_sum(2.5), 2.5);
  comm.barrier();

  auto w = comm.all_reduce_async(t);
  EXPECT_TRUE(w->done());
  w->wait();
}

TEST(LocalCommunicator, LedgerRecordsPayloadWithZeroWire) {
  LocalCommunicator comm;
  comm_ledger().reset();
  Tensor x = Tensor::zeros({10}, DType::F32);    // 40 bytes
  Tensor y = Tensor::zeros({10}, DType::BF16);   // 20 bytes
  {
    CommPhaseScope p(CommPhase::GradReduce);
    comm.all_reduce(x);
    comm.reduce_scatter(x, Tensor::zeros({10}, DType::F32));
  }
  {
    CommPhaseScope p(CommPhase::ForwardGather);
    comm.all_gather(y, Tensor::zeros({10}, DType::BF16));
  }
  comm.broadcast(x, 0);
  comm.all_reduce_sum(1.0);
  comm.all_gather_i64(1);  // metadata: not recorded
  auto expect = [](CollectiveKind k, CommPhase p, int64_t calls, int64_t payload) {
    CommStats s = comm_ledger().stats(k, p);
    EXPECT_EQ(s.calls, calls) << collective_name(k) << "/" << phase_name(p);
    EXPECT_EQ(s.payload_bytes, payload) << collective_name(k) << "/" << phase_name(p);
    EXPECT_EQ(s.wire_bytes, 0) << collective_name(k) << "/" << phase_name(p);
  };
  expect(CollectiveKind::AllReduce, CommPhase::GradReduce, 1, 40);
  expect(CollectiveKind::ReduceScatter, CommPhase::GradReduce, 1, 40);
  expect(CollectiveKind::AllGather, CommPhase::ForwardGather, 1, 20);
  expect(CollectiveKind::Broadcast, CommPhase::Other, 1, 40);
  expect(CollectiveKind::AllReduce, CommPhase::Other, 1, 8);
  EXPECT_EQ(comm_ledger().total().calls, 5);
  comm_ledger().reset();
}

TEST(LocalCommunicator, MismatchedTensorsThrowWithPrefixAndBothSizes) {
  LocalCommunicator comm;
  Tensor a = Tensor::zeros({6});
  std::string msg = error_of([&] { comm.all_gather(a, Tensor::zeros({7})); });
  EXPECT_EQ(msg.rfind("[rank 0/1] all_gather: input has 6 elements, output has 7 elements", 0), 0u) << msg;
  msg = error_of([&] { comm.reduce_scatter(a, Tensor::zeros({5})); });
  EXPECT_EQ(msg.rfind("[rank 0/1] reduce_scatter: input has 6 elements, output has 5 elements", 0), 0u) << msg;
  msg = error_of([&] { comm.all_gather(a, Tensor::zeros({6}, DType::F64)); });
  EXPECT_NE(msg.find("[rank 0/1] all_gather: input dtype f32 != output dtype f64"), std::string::npos) << msg;
  Tensor strided = Tensor::from_storage(Tensor::zeros({12}).storage(), {6}, {2}, 0, DType::F32);
  msg = error_of([&] { comm.all_reduce(strided); });
  EXPECT_NE(msg.find("[rank 0/1] all_reduce: input must be contiguous"), std::string::npos) << msg;
  msg = error_of([&] { comm.broadcast(a, 1); });
  EXPECT_NE(msg.find("[rank 0/1] broadcast: root 1 out of range [0, 1)"), std::string::npos) << msg;
  msg = error_of([&] { comm.all_reduce(Tensor()); });
  EXPECT_NE(msg.find("[rank 0/1] all_reduce: undefined tensor"), std::string::npos) << msg;
}

}  // namespace zdl::dist

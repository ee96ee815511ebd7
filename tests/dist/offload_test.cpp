// Offload on one rank (docs/offload.md): bit-identical runs, what leaves memory, checkpoints into
// and out of offload, and the clear errors of a bad offload directory. The same cases run at
// N = 2, 4 in tests/dist/mpi/zero_mpi_test.cpp.
#include <signal.h>
#include <sys/resource.h>

#include <fstream>

#include "offload_cases.h"

namespace zdl::dist::testing {

namespace {
Communicator& local() {
  static std::shared_ptr<Communicator> c = dist::init();
  return *c;
}

// The error a manager with these offload options raises at construction or wrap ("" if none).
std::string wrap_error(ZeroStage stage, OffloadOptions o) {
  return zdl::testing::error_of([&] { run_zero(local(), {.stage = stage, .steps = 1, .offload = std::move(o)}); });
}
}  // namespace

TEST(Offload, EveryStageIsBitIdenticalToTheRunWithout) {
  ASSERT_EQ(local().size(), 1);
  expect_offload_bit_identical(local());
}

TEST(Offload, OffloadedStatesLeaveMemory) { expect_offloaded_states_leave_memory(local()); }

TEST(Offload, TrafficToTheDiskFollowsTheClosedForm) { expect_offload_traffic_closed_form(local()); }

// The scratch file is unlinked when made: removing the directory during a run changes nothing.
TEST(Offload, ADirectoryRemovedDuringTheRunChangesNothing) {
  zdl::testing::TempDir tmp;
  const std::string dir = tmp.path() + "/offload";
  std::filesystem::create_directory(dir);
  RunConfig c{.stage = ZeroStage::Three, .dtype = DType::BF16};
  const RunResult ref = run_zero(local(), c);
  c.offload = {.optimizer = OffloadTarget::Nvme, .params = OffloadTarget::Nvme, .dir = dir};
  Probe probe;
  probe.after_wrap = [&](ZeroPartitioner&) { std::filesystem::remove_all(dir); };
  expect_same_bits(local(), run_zero(local(), c, probe), ref, "offload dir removed after wrap");
  EXPECT_FALSE(std::filesystem::exists(dir));
}

TEST(Offload, CheckpointsResumeIntoAndOutOfOffloadExactly) { expect_offloaded_checkpoints_resume_exactly(local()); }

TEST(Offload, BadOptionsAndDirectoriesAreClearErrors) {
  zdl::testing::TempDir tmp;
  const std::string missing = tmp.path() + "/missing", file = tmp.path() + "/a_file";
  std::ofstream(file) << "x";
  auto nvme = [](std::string dir) { return OffloadOptions{.optimizer = OffloadTarget::Nvme, .dir = std::move(dir)}; };
  std::string e = wrap_error(ZeroStage::Three, nvme(missing));
  EXPECT_NE(e.find("'" + missing + "' is not a directory"), std::string::npos) << e;
  e = wrap_error(ZeroStage::Three, nvme(file));
  EXPECT_NE(e.find("is not a directory"), std::string::npos) << e;
  e = wrap_error(ZeroStage::Three, nvme(""));
  EXPECT_NE(e.find("needs a directory for its scratch files (--offload-dir)"), std::string::npos) << e;
  e = wrap_error(ZeroStage::Two, {.params = OffloadTarget::Nvme, .dir = tmp.path()});
  EXPECT_NE(e.find("use ZeRO-3"), std::string::npos) << e;
  e = wrap_error(ZeroStage::Three, {.params = OffloadTarget::Cpu});
  EXPECT_NE(e.find("parameter offload takes none or nvme"), std::string::npos) << e;
  // cpu on CPU ranks is where the states are already: the plain run.
  EXPECT_EQ(wrap_error(ZeroStage::Three, {.optimizer = OffloadTarget::Cpu}), "");
  // Nothing is left in the directory: the scratch file is unlinked as soon as it is made.
  EXPECT_EQ(wrap_error(ZeroStage::Three, nvme(tmp.path())), "");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(tmp.path()), {}), 1) << "only a_file";
}

// A disk without room fails when the states are placed, naming the directory, not mid-step. The
// disk is made "full" with a file-size limit (the same error path as ENOSPC: posix_fallocate
// refuses the region).
TEST(Offload, ADirectoryWithoutRoomFailsAtPlacement) {
  zdl::testing::TempDir tmp;
  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = ::signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of the signal
  struct rlimit small = old;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::string e = wrap_error(ZeroStage::Three, {.optimizer = OffloadTarget::Nvme, .dir = tmp.path()});
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_NE(e.find("the offload directory '" + tmp.path() + "' has no room for"), std::string::npos) << e;
  EXPECT_NE(e.find("exp_avg"), std::string::npos) << e;
}

}  // namespace zdl::dist::testing

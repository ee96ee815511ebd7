// Offload on one rank (docs/offload.md): bit-identical runs, what leaves memory, checkpoints into
// and out of offload, and the clear errors of a bad offload directory. The same cases run at
// N = 2, 4 in tests/dist/mpi/zero_mpi_test.cpp.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>
#include <sys/resource.h>

#include <cstdlib>
#include <cstring>
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

TEST(Offload, TheWindowGivesTheBitsOfTheRunWithout) { expect_window_bit_identical(local()); }

TEST(Offload, TheWindowMovesTheStatesIoOutOfTheStep) { expect_window_moves_io_out_of_the_step(local()); }

TEST(Offload, CheckpointsResumeIntoAndOutOfOffloadExactly) { expect_offloaded_checkpoints_resume_exactly(local()); }

TEST(Offload, HostTierGivesTheBitsOfTheRunWithout) { expect_host_tier_bit_identical(local()); }

TEST(Offload, HostTierMemoryFollowsTheClosedForm) { expect_host_tier_memory_closed_form(local()); }

TEST(Offload, HostTierCheckpointsResumeExactly) { expect_host_tier_checkpoints_resume_exactly(local()); }

TEST(Offload, HostTierRereadsGradientsAfterAnUpload) { expect_host_tier_rereads_gradients(local()); }

// Without the test switch, cpu on CPU ranks is the plain run: no master of its own, no exchange.
TEST(Offload, CpuOnCpuRanksAddsNothing) {
  const MemoryStats before = memory_ledger().stats(Device::cpu());
  int64_t plain = -1, cpu = -1;
  for (OffloadTarget t : {OffloadTarget::None, OffloadTarget::Cpu}) {
    Probe probe;
    probe.after_step = [&](ZeroPartitioner&, int) {
      (t == OffloadTarget::None ? plain : cpu) = memory_ledger().stats(Device::cpu()).current_of(MemoryCategory::OptimizerState) +
                                                 memory_ledger().stats(Device::cpu()).current_of(MemoryCategory::GradientShard) -
                                                 before.current_of(MemoryCategory::OptimizerState) -
                                                 before.current_of(MemoryCategory::GradientShard);
    };
    run_zero(local(), {.stage = ZeroStage::Three, .steps = 1, .offload = {.optimizer = t}}, probe);
  }
  EXPECT_GT(plain, 0);
  EXPECT_EQ(cpu, plain);
}

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
  e = wrap_error(ZeroStage::Three, {.params = OffloadTarget::Nvme, .dir = tmp.path(), .window_bytes = 1 << 20});
  EXPECT_NE(e.find("needs optimizer offload to nvme (--offload-optimizer nvme)"), std::string::npos) << e;
  OffloadOptions negative = nvme(tmp.path());
  negative.window_bytes = -1;
  e = wrap_error(ZeroStage::Three, negative);
  EXPECT_NE(e.find("window must be >= 0 bytes, got -1"), std::string::npos) << e;
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

// The store moves any buffer exactly, aligned or not, of any size (a partial last block, more than
// the 4 MiB bounce buffer), with and without O_DIRECT, without touching its neighbours; and
// direct I/O is in effect wherever the directory's filesystem accepts it.
TEST(Offload, TheStoreMovesAnyBufferWithAndWithoutDirectIo) {
  zdl::testing::TempDir tmp;
  // Whether the filesystem takes O_DIRECT, asked as the store asks it (F_SETFL on an open file):
  // opening with O_TMPFILE | O_DIRECT would also need O_TMPFILE, which some filesystems that take
  // O_DIRECT lack (overlayfs before Linux 6.6, NFS).
  std::string probe_path = tmp.path() + "/probe.XXXXXX";
  const int probe = ::mkostemp(probe_path.data(), O_CLOEXEC);
  ASSERT_GE(probe, 0) << "cannot create a file in " << tmp.path();
  ::unlink(probe_path.c_str());
  const int probe_flags = ::fcntl(probe, F_GETFL);
  const bool fs_takes_direct = probe_flags >= 0 && ::fcntl(probe, F_SETFL, probe_flags | O_DIRECT) == 0;
  ::close(probe);
  const std::vector<int64_t> sizes = {1, 4095, 4096, 4097, (5 << 20) + 3, 64 << 10};
  for (bool direct : {true, false}) {
    NvmeStore store(tmp.path(), "[test]", direct);
    EXPECT_EQ(store.direct(), direct && fs_takes_direct) << "direct requested: " << direct;
    for (int64_t skew : {0, 1, 4096 + 8}) {  // where each buffer starts past a page boundary
      std::vector<int64_t> at;
      std::vector<std::vector<char>> src;
      for (size_t i = 0; i < sizes.size(); ++i) {
        at.push_back(store.reserve(sizes[i], "test region"));
        std::vector<char> v(static_cast<size_t>(sizes[i]));
        Philox g(5, i * 7 + static_cast<uint64_t>(skew));
        for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<char>(g.block(k)[0]);
        src.push_back(std::move(v));
      }
      // Written from, and read into, page-aligned memory shifted by `skew`.
      std::vector<std::shared_future<void>> io;
      std::vector<char*> bufs;
      auto capacity = [&](size_t i) { return static_cast<size_t>(sizes[i] + skew + 2 * 4096) / 4096 * 4096; };
      for (size_t i = 0; i < sizes.size(); ++i) {
        char* b = static_cast<char*>(std::aligned_alloc(4096, capacity(i)));
        std::memcpy(b + skew, src[i].data(), src[i].size());
        bufs.push_back(b);
        io.push_back(store.write_async(at[i], b + skew, sizes[i]));
      }
      for (auto& f : io) f.get();
      io.clear();
      for (size_t i = 0; i < sizes.size(); ++i) {
        std::memset(bufs[i], 0x5a, capacity(i));
        io.push_back(store.read_async(at[i], bufs[i] + skew, sizes[i]));
      }
      for (auto& f : io) f.get();
      for (size_t i = 0; i < sizes.size(); ++i) {
        EXPECT_EQ(std::memcmp(bufs[i] + skew, src[i].data(), src[i].size()), 0)
            << "direct " << direct << " size " << sizes[i] << " skew " << skew;
        for (size_t k = 0; k < capacity(i); ++k)
          if (k < static_cast<size_t>(skew) || k >= static_cast<size_t>(sizes[i] + skew))
            ASSERT_EQ(bufs[i][k], 0x5a) << "a read of " << sizes[i] << " bytes wrote outside its buffer at " << k;
        std::free(bufs[i]);
      }
    }
  }
}

}  // namespace zdl::dist::testing

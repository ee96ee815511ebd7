// Main of test_dist_mpi: runs the GoogleTest suite on every rank and makes every rank's result
// count. Usage (ctest does this): mpirun -np N test_dist_mpi --expect-world-size=N
//
// - The world size is asserted: a binary started by a different MPI's mpirun does not see the
//   launcher and runs N copies of a size-1 "rank 0", which would pass trivially.
// - Rank 0 prints the full gtest output; other ranks print only their failures, prefixed.
// - The exit code is nonzero on every rank if any rank failed (the failure flags are summed
//   over ranks before MPI is finalized), so mpirun and ctest report it.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "dist/comm/communicator.h"
#include "mpi_test_env.h"

namespace zdl::dist::testing {

namespace {
std::shared_ptr<Communicator> g_world;

// Ranks other than 0: one line per failed assertion, prefixed with the rank.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(std::string prefix) : prefix_(std::move(prefix)) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::cerr << prefix_ << " FAILURE " << (r.file_name() ? r.file_name() : "?") << ":" << r.line_number() << "\n"
              << r.summary() << std::endl;
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed())
      std::cerr << prefix_ << " FAILED " << info.test_suite_name() << "." << info.name() << std::endl;
  }

 private:
  std::string prefix_;
};
}  // namespace

Communicator& world() { return *g_world; }

}  // namespace zdl::dist::testing

int main(int argc, char** argv) {
  using namespace zdl::dist;
  ::testing::InitGoogleTest(&argc, argv);
  int expected = 0;
  for (int i = 1; i < argc; ++i) {
    const char* flag = "--expect-world-size=";
    if (std::strncmp(argv[i], flag, std::strlen(flag)) == 0) {
      expected = std::atoi(argv[i] + std::strlen(flag));
    } else {
      std::fprintf(stderr, "test_dist_mpi: unknown argument '%s' (use --expect-world-size=N and gtest flags)\n",
                   argv[i]);
      return 2;
    }
  }
  std::shared_ptr<Communicator> comm;
  try {
    comm = init();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "test_dist_mpi: dist::init failed: %s\n", e.what());
    return 2;
  }
  if (expected > 0 && (comm->size() != expected || comm->backend() != "mpi")) {
    std::fprintf(stderr,
                 "%s test_dist_mpi: expected an MPI world of %d ranks, got backend %s with %d rank(s). Was it started "
                 "by this MPI's mpirun (%s)? A different MPI's launcher runs independent size-1 processes.\n",
                 comm->prefix().c_str(), expected, comm->backend().c_str(), comm->size(),
                 launched_by_mpi() ? "a launcher was detected" : "no launcher was detected");
    return 3;
  }
  zdl::dist::testing::g_world = comm;
  if (comm->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new zdl::dist::testing::FailurePrinter(comm->prefix()));
  }
  int rc = RUN_ALL_TESTS();
  double failed_ranks = 0;
  try {
    failed_ranks = comm->all_reduce_sum(rc != 0 ? 1.0 : 0.0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s test_dist_mpi: final failure count did not complete: %s\n", comm->prefix().c_str(),
                 e.what());
    abort_job(4);
  }
  // Rank 0's counts (tests skip on every rank alike). ctest's dist_cuda_mpi_np* entries read
  // "0 failed, 0 passed, K skipped" as a skip (tests/CMakeLists.txt).
  if (comm->rank() == 0) {
    const ::testing::UnitTest& u = *::testing::UnitTest::GetInstance();
    std::printf("test_dist_mpi: %d rank(s), %d failed, %d passed, %d skipped\n", comm->size(),
                static_cast<int>(failed_ranks), u.successful_test_count(), u.skipped_test_count());
  }
  zdl::dist::testing::g_world.reset();
  comm.reset();
  return failed_ranks > 0 ? 1 : 0;
}

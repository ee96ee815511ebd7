// The frame shared by zerodl's multi-rank command-line programs (train_gpt, zero_walkthrough):
// parse the flags, start the process group, give each rank its share of the cores, run, and
// turn errors into exit codes: 0 done, 2 bad input (UsageError, flags), 1 failure. A rank that
// fails ends the whole job, since the others may be blocked in a collective it will never join.
//
//   int main(int argc, char** argv) {
//     CLI::App app{"my_tool: ..."};  /* add options */
//     return examples::run_program("my_tool", app, argc, argv, [&](dist::Communicator& comm) { ... return 0; });
//   }
#pragma once
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <stdexcept>

#include "dist/communicator.h"

namespace zdl::examples {

// A bad-input error: printed as is (by rank 0), exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A failure every rank raises at the same point (e.g. a non-finite loss, known to all through
// an all-reduce): printed once by rank 0, exit code 1, no job abort needed.
struct CollectiveStop : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline int run_program(const char* name, CLI::App& app, int argc, char** argv,
                       const std::function<int(dist::Communicator&)>& run) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: %s (see --help)\n", name, e.what());
    return 2;
  }
  std::shared_ptr<dist::Communicator> comm;
  try {
    comm = dist::init();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: cannot start the process group: %s\n", name, e.what());
    return 1;
  }
  // Ranks on one machine share its cores: unless told otherwise, give each rank its share.
  if (comm->size() > 1 && !std::getenv("OMP_NUM_THREADS"))
    omp_set_num_threads(std::max(1, omp_get_num_procs() / comm->size()));
  try {
    return run(*comm);
  } catch (const UsageError& e) {
    if (comm->rank() == 0) std::fprintf(stderr, "%s: %s\n", name, e.what());
    return 2;
  } catch (const CollectiveStop& e) {
    if (comm->rank() == 0) std::fprintf(stderr, "\n%s: %s\n", name, e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\n%s: error: %s\n", name, e.what());
    if (comm->size() > 1) dist::abort_job(1);
    return 1;
  }
}

}  // namespace zdl::examples

// The frame of zerodl's multi-rank command-line programs (train_gpt, zero_walkthrough): parse
// the flags, start the process group (dist::init gives each rank its share of the cores), run,
// and turn errors into exit codes: 0 done, 2 bad input, 1 failure. A rank that fails ends the
// whole job, since the others may be blocked in a collective it will never join.
//
//   int main(int argc, char** argv) {
//     CLI::App app{"my_tool: ..."};  /* add options */
//     return io::run_program("my_tool", app, argc, argv, [&](dist::Communicator& comm) { ... return 0; });
//   }
//
// What reaches the user (stderr), by what went wrong:
//   a flag CLI11 refuses, a malformed number   "my_tool: MESSAGE (see --help)"            exit 2
//   a bad environment variable (io/environment.h) "my_tool: MESSAGE"                       exit 2
//   UsageError                                 "my_tool: MESSAGE", one rank prints        exit 2
//   CollectiveStop                             "\nmy_tool: MESSAGE", rank 0 prints        exit 1
//   dist::CollectiveError                      "\nmy_tool: error: MESSAGE", rank 0        exit 1
//   any other exception (zdl::Error, out of memory, ...): "\nmy_tool: error: [rank r/N] MESSAGE",
//   printed once ([Note: one fatal message] in io/fatal_report.h), then the job is aborted; exit 1
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "dist/comm/communicator.h"

namespace zdl::io {

// A bad-input error: printed as is (by rank `printer`, 0 unless only another rank knows the
// message, see agree_on_usage), exit code 2.
struct UsageError : std::runtime_error {
  explicit UsageError(const std::string& message, int printer = 0) : std::runtime_error(message), printer(printer) {}
  int printer;
};

// A failure every rank raises at the same point (e.g. a non-finite loss, known to all through
// an all-reduce): printed once by rank 0, exit code 1, no job abort needed.
struct CollectiveStop : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Runs f on this rank and agrees with every rank on the outcome (one all_gather_i64, a
// collective: every rank calls it at the same point). For checks whose result can differ
// between ranks (a file only rank 0 opens, a path only rank 0 probes): a UsageError on any rank
// becomes one on every rank, so no rank walks on into a collective the others never join; the
// lowest failing rank prints its message.
template <class F>
void agree_on_usage(dist::Communicator& comm, F&& f) {
  std::string message;
  bool failed = false;
  try {
    f();
  } catch (const UsageError& e) {
    failed = true;
    message = e.what();
  }
  if (comm.size() == 1) {
    if (failed) throw UsageError(message);
    return;
  }
  const std::vector<int64_t> all = comm.all_gather_i64(failed ? 1 : 0);
  for (int r = 0; r < comm.size(); ++r)
    if (all[static_cast<size_t>(r)] != 0) throw UsageError(r == comm.rank() ? message : std::string(), r);
}

// Runs `run` on every rank and returns the exit code (above). init_options (optional) gives the
// process group's options from the parsed flags (e.g. the device); a UsageError it throws is
// reported like one from run (exit 2), once, after the group started on the CPU. path_flags:
// the flags whose values may differ between ranks (io/program_flags.h, agree_on_flags).
int run_program(const char* name, CLI::App& app, int argc, char** argv,
                const std::function<int(dist::Communicator&)>& run,
                const std::function<dist::InitOptions()>& init_options = {},
                const std::vector<std::string>& path_flags = {});

}  // namespace zdl::io

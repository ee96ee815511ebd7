#include "io/program_main.h"

#include <cstdio>
#include <memory>
#include <optional>
#include <utility>

#include "io/fatal_report.h"
#include "io/program_flags.h"

namespace zdl::io {

namespace {

// What a failure of `run` prints, and its exit code (the table in io/program_main.h).
int report_failure(const char* name, dist::Communicator& comm, const std::optional<FatalReport>& report) {
  try {
    throw;
  } catch (const UsageError& e) {
    if (comm.rank() == e.printer) std::fprintf(stderr, "%s: %s\n", name, without_code_location(e.what()).c_str());
    return 2;
  } catch (const CollectiveStop& e) {
    if (comm.rank() == 0) std::fprintf(stderr, "\n%s: %s\n", name, e.what());
    return 1;
  } catch (const dist::CollectiveError& e) {  // every rank has it: printed once, no abort
    if (comm.rank() == 0) std::fprintf(stderr, "\n%s: error: %s\n", name, e.what());
    return 1;
  } catch (const std::exception& e) {  // this rank alone may know: [Note: one fatal message]
    std::string message = e.what();
    if (comm.size() > 1 && message.rfind("[rank ", 0) != 0) message = comm.prefix() + " " + message;
    if (!report || report->first_to_say(message)) std::fprintf(stderr, "\n%s: error: %s\n", name, message.c_str());
    if (report) report->before_abort();
    if (comm.size() > 1) dist::abort_job(1);
    return 1;
  }
}

}  // namespace

int run_program(const char* name, CLI::App& app, int argc, char** argv,
                const std::function<int(dist::Communicator&)>& run,
                const std::function<dist::InitOptions()>& init_options, const std::vector<std::string>& path_flags) {
  if (std::optional<int> code = check_invocation(name, app, argc, argv)) return *code;
  std::shared_ptr<dist::Communicator> comm;
  dist::InitOptions options;
  std::optional<UsageError> bad_options;
  if (init_options) {
    try {
      options = init_options();
    } catch (const UsageError& e) {
      bad_options = e;
    }
  }
  // Nodes of a given size are set once the group knows its size: a size that does not divide the
  // ranks is a usage error, printed once.
  const int ranks_per_node = std::exchange(options.ranks_per_node, 0);
  try {
    comm = dist::init(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: cannot start the process group: %s\n", name, e.what());
    return 1;
  }
  std::optional<FatalReport> report;
  try {
    report.emplace(*comm);
    if (bad_options) throw *bad_options;
    if (ranks_per_node > 0) {
      if (comm->size() % ranks_per_node != 0)
        throw UsageError(detail::str("--ranks-per-node ", ranks_per_node, " must divide the number of ranks ",
                                     comm->size()));
      comm->set_ranks_per_node(ranks_per_node);
    }
    agree_on_flags(*comm, app, path_flags);
    return run(*comm);
  } catch (...) {
    return report_failure(name, *comm, report);
  }
}

}  // namespace zdl::io

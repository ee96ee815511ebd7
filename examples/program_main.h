// The frame shared by zerodl's multi-rank command-line programs (train_gpt, zero_walkthrough):
// parse the flags, start the process group (dist::init gives each rank its share of the
// cores), run, and turn errors into exit codes: 0 done, 2 bad input (UsageError, flags), 1
// failure. A rank that fails ends the whole job, since the others may be blocked in a
// collective it will never join.
//
//   int main(int argc, char** argv) {
//     CLI::App app{"my_tool: ..."};  /* add options */
//     return examples::run_program("my_tool", app, argc, argv, [&](dist::Communicator& comm) { ... return 0; });
//   }
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <sstream>
#include <thread>
#include <regex>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/hash.h"
#include "dist/comm/communicator.h"

namespace zdl::examples {

// A bad-input error: printed as is (by rank `printer`, 0 unless only another rank knows the
// message, see agree_on_usage), exit code 2.
struct UsageError : std::runtime_error {
  explicit UsageError(const std::string& message, int printer = 0) : std::runtime_error(message), printer(printer) {}
  int printer;
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

// [Note: ranks that disagree] Every rank of a job must run with the same flags: ranks with
// another --n-embd, --lr or --seed would train (or stitch checkpoints from) different models and
// still exit 0. So before anything else the ranks compare their flags: one all_gather of a hash
// of all of them; on a difference, one more per flag to find the first that differs and the
// first rank that has another value, whose value rank 0 receives to name both. Paths
// (`path_flags`) may differ between hosts: only whether they are given must agree (their files'
// contents are compared where they are read, e.g. the data's fingerprint).
inline void agree_on_flags(dist::Communicator& comm, const CLI::App& app, const std::vector<std::string>& path_flags) {
  if (comm.size() == 1) return;
  std::vector<std::pair<std::string, std::string>> flags;  // (name, value as the rank sees it)
  for (const CLI::Option* opt : app.get_options()) {
    const std::string name = opt->get_name();
    if (name == "--help") continue;
    // The value in force: a flag given twice counts once, with its last value (as CLI11 does).
    std::string value = opt->results().empty() ? "" : opt->results().back();
    if (std::find(path_flags.begin(), path_flags.end(), name) != path_flags.end())
      value = opt->count() == 0 ? "(not given)" : "(a path)";
    flags.emplace_back(name, opt->count() == 0 && value.empty() ? "(default)" : value);
  }
  uint64_t all = kFnv1aOffset;
  for (auto& [n, v] : flags) all = fnv1a64(n + "=" + v + ";", all);
  std::vector<int64_t> hashes = comm.all_gather_i64(static_cast<int64_t>(all));
  if (std::all_of(hashes.begin(), hashes.end(), [&](int64_t h) { return h == hashes[0]; })) return;
  for (auto& [name, value] : flags) {
    hashes = comm.all_gather_i64(static_cast<int64_t>(fnv1a64(value)));
    int other = 0;
    for (int r = 1; r < comm.size() && other == 0; ++r)
      if (hashes[static_cast<size_t>(r)] != hashes[0]) other = r;
    if (other == 0) continue;
    const std::string theirs = comm.broadcast_string(value, other);
    throw UsageError(detail::str("ranks disagree on ", name, ": rank 0 has ", value, ", rank ", other, " has ", theirs,
                                 "; every rank must be started with the same flags"));
  }
  throw UsageError("ranks disagree on their flags (in their order); start every rank with the same command line");
}

// A failure every rank raises at the same point (e.g. a non-finite loss, known to all through
// an all-reduce): printed once by rank 0, exit code 1, no job abort needed.
struct CollectiveStop : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Numbers CLI11 (2.1) lets through although they are malformed: nan passes every range check
// (each comparison is false), an integer too large for 64 bits is clamped to the largest one,
// and "-1" wraps around in an unsigned option. Returns the complaint, or "" if all are fine.
inline std::string malformed_number(const CLI::App& app) {
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->count() == 0 || opt->results().empty()) continue;
    const std::string type = opt->get_type_name(), v = opt->results().back();
    const bool is_float = type.find("FLOAT") != std::string::npos, is_int = type.find("INT") != std::string::npos;
    if (!is_float && !is_int) continue;
    const char* s = v.c_str();
    char* end = nullptr;
    errno = 0;
    if (is_float) {
      const double d = std::strtod(s, &end);
      if (end != s && !std::isfinite(d)) return opt->get_name() + ": '" + v + "' is not a finite number";
    } else if (type.rfind("UINT", 0) == 0 && v.find('-') != std::string::npos) {
      return opt->get_name() + ": '" + v + "' is negative";
    } else {
      if (type.rfind("UINT", 0) == 0) std::strtoull(s, &end, 0);
      else std::strtoll(s, &end, 0);
      if (end != s && errno == ERANGE) return opt->get_name() + ": '" + v + "' does not fit in 64 bits";
    }
  }
  return "";
}

// CLI11's range message for PositiveNumber / NonNegativeNumber prints DBL_MAX in full (309
// digits): "Value 0 not in range 0.000000 to 17976931348...". Said briefly instead.
inline std::string short_parse_message(std::string m) {
  static const std::regex unbounded(R"(Value (\S+) not in range 0\.0+ to [0-9]{30,}(\.[0-9]+)?)");
  std::smatch hit;
  if (!std::regex_search(m, hit, unbounded)) return m;
  const double v = std::strtod(hit[1].str().c_str(), nullptr);
  const char* why = !std::isfinite(v) ? " is not a finite number" : v == 0.0 ? " must be positive" : " must not be negative";
  return hit.prefix().str() + hit[1].str() + why + hit.suffix().str();
}

// [Note: one fatal message] A failure one rank sees alone (out of memory, a write error) ends
// the job through abort_job, with no collective to agree on who prints: the others may be
// blocked in one. Several ranks often fail the same way at once (the same allocation on every
// rank), and each would print the same message. So the ranks share a file name (agreed at
// startup: rank 0's random key) in the temporary directory; the first rank to fail creates the
// file with its message (O_EXCL) and prints; a later rank prints only a message that differs.
// Ranks on other hosts have their own temporary directory: at most one copy per host.
class FatalReport {
 public:
  explicit FatalReport(dist::Communicator& comm) {
    if (comm.size() == 1) return;
    std::string key;
    if (comm.rank() == 0) key = detail::str(std::hex, std::random_device{}(), std::random_device{}(), "-", ::getpid());
    path_ = (std::filesystem::temp_directory_path() / ("zdl-fatal-" + comm.broadcast_string(key, 0))).string();
  }
  // Whether this rank should print `message` ("[rank r/N] " at its start is not compared).
  bool first_to_say(const std::string& message) const {
    if (path_.empty()) return true;
    const std::string body = without_rank(message);
    const int fd = ::open(path_.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
    if (fd >= 0) {  // first: say it (a failed write only means later ranks print theirs too)
      [[maybe_unused]] const ssize_t written = ::write(fd, body.data(), body.size());
      ::close(fd);
      created_ = true;
      return true;
    }
    if (errno != EEXIST) return true;
    // Another rank was first: read its message (give its write a moment to land).
    for (int i = 0; i < 20; ++i) {
      std::ifstream in(path_);
      std::stringstream ss;
      ss << in.rdbuf();
      if (!ss.str().empty()) return ss.str() != body;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }
  // Before the abort: the rank that made the file gives the others a moment to compare (they
  // fail within milliseconds when they fail alike), then removes it.
  void before_abort() const {
    if (!created_) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ::unlink(path_.c_str());
  }

 private:
  static std::string without_rank(const std::string& m) {
    if (m.rfind("[rank ", 0) != 0) return m;
    const auto end = m.find("] ");
    return end == std::string::npos ? m : m.substr(end + 2);
  }
  std::string path_;
  mutable bool created_ = false;
};

// init_options (optional) gives the process group's options from the parsed flags (e.g. the
// device); a UsageError it throws is reported like one from run (exit 2), once, after the group
// started on the CPU.
inline int run_program(const char* name, CLI::App& app, int argc, char** argv,
                       const std::function<int(dist::Communicator&)>& run,
                       const std::function<dist::InitOptions()>& init_options = {},
                       const std::vector<std::string>& path_flags = {}) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: %s (see --help)\n", name, short_parse_message(e.what()).c_str());
    return 2;
  }
  if (std::string bad = malformed_number(app); !bad.empty()) {
    std::fprintf(stderr, "%s: %s (see --help)\n", name, bad.c_str());
    return 2;
  }
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
    agree_on_flags(*comm, app, path_flags);
    return run(*comm);
  } catch (const UsageError& e) {
    if (comm->rank() == e.printer) std::fprintf(stderr, "%s: %s\n", name, e.what());
    return 2;
  } catch (const CollectiveStop& e) {
    if (comm->rank() == 0) std::fprintf(stderr, "\n%s: %s\n", name, e.what());
    return 1;
  } catch (const dist::CollectiveError& e) {  // every rank has it: printed once, no abort
    if (comm->rank() == 0) std::fprintf(stderr, "\n%s: error: %s\n", name, e.what());
    return 1;
  } catch (const std::exception& e) {  // this rank alone may know: [Note: one fatal message]
    std::string message = e.what();
    if (comm->size() > 1 && message.rfind("[rank ", 0) != 0) message = comm->prefix() + " " + message;
    if (!report || report->first_to_say(message)) std::fprintf(stderr, "\n%s: error: %s\n", name, message.c_str());
    if (report) report->before_abort();
    if (comm->size() > 1) dist::abort_job(1);
    return 1;
  }
}

}  // namespace zdl::examples

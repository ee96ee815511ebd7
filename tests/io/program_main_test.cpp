// The program harness (io/program_main.h): what each kind of failure prints and which exit code
// it gives, on one rank (no launcher: dist::init starts a local process group).
#include "io/program_main.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "core/memory.h"
#include "core/tensor.h"
#include "io/fatal_report.h"
#include "io/program_flags.h"

namespace zdl::io {
namespace {

// One run of a program named "prog" with flags --steps (positive), --lr, --seed (unsigned) and
// --out (a path): its exit code, what it printed, and whether `run` was reached.
struct Outcome {
  int code = -1;
  std::string out, err;
  bool ran = false;
};

Outcome run_prog(std::vector<std::string> args, const std::function<int(dist::Communicator&)>& body,
                 const std::function<dist::InitOptions()>& init_options = {}) {
  int64_t steps = 1;
  double lr = 0.1;
  uint64_t seed = 0;
  std::string out;
  CLI::App app{"prog: a test program"};
  app.add_option("--steps", steps, "steps")->check(CLI::PositiveNumber);
  app.add_option("--lr", lr, "learning rate");
  app.add_option("--seed", seed, "seed");
  app.add_option("--out", out, "a directory");
  args.insert(args.begin(), "prog");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  Outcome o;
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  o.code = run_program(
      "prog", app, static_cast<int>(argv.size()), argv.data(),
      [&](dist::Communicator& comm) {
        o.ran = true;
        return body(comm);
      },
      init_options, {"--out"});
  o.err = ::testing::internal::GetCapturedStderr();
  o.out = ::testing::internal::GetCapturedStdout();
  return o;
}

int succeed(dist::Communicator&) { return 0; }

TEST(ProgramMain, ReturnsWhatTheProgramReturns) {
  Outcome o = run_prog({"--steps", "3", "--out", "x"}, [](dist::Communicator& comm) { return comm.size() == 1 ? 0 : 5; });
  EXPECT_EQ(o.code, 0);
  EXPECT_TRUE(o.ran);
  EXPECT_EQ(o.err, "");
  EXPECT_EQ(run_prog({}, [](dist::Communicator&) { return 3; }).code, 3);
}

// A program whose body throws `e`.
template <class E>
Outcome throwing(const E& e) {
  return run_prog({}, [e](dist::Communicator&) -> int { throw e; });
}

TEST(ProgramMain, EachFailureHasItsExitCodeAndMessage) {
  struct Case {
    Outcome o;
    int code;
    std::string err;
  };
  const Case cases[] = {
      {throwing(UsageError("--data: no file 'x.txt'")), 2, "prog: --data: no file 'x.txt'\n"},  // bad input
      {throwing(Error("the checkpoint is truncated")), 1, "\nprog: error: the checkpoint is truncated\n"},
      {throwing(std::runtime_error("disk full")), 1, "\nprog: error: disk full\n"},
      {throwing(CollectiveStop("step 3: loss nan; stopping")), 1, "\nprog: step 3: loss nan; stopping\n"},
      {throwing(dist::CollectiveError("rank 1 failed to save")), 1, "\nprog: error: rank 1 failed to save\n"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(c.o.code, c.code) << c.err;
    EXPECT_EQ(c.o.err, c.err);
    EXPECT_TRUE(c.o.ran);
  }
}

TEST(ProgramMain, OutOfMemoryExits1AsAnError) {
  Outcome o = run_prog({}, [](dist::Communicator&) -> int {
    memory_ledger().set_cap(DeviceType::CPU, 1024);
    try {
      Tensor::zeros({1024});  // 4 KiB over a 1 KiB cap
    } catch (...) {
      memory_ledger().set_cap(DeviceType::CPU, 0);
      throw;
    }
    return 0;
  });
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.err.rfind("\nprog: error: out of memory on cpu: allocating 4.0 KiB", 0), 0u) << o.err;
}

TEST(ProgramMain, BadFlagsExit2BeforeTheProgramRuns) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--bogus"}, "prog: The following argument was not expected: --bogus (see --help)\n"},
      {{"--steps", "0"}, "prog: --steps: 0 must be positive (see --help)\n"},
      {{"--lr", "nan"}, "prog: --lr: 'nan' is not a finite number (see --help)\n"},
      {{"--seed", "-1"}, "prog: --seed: '-1' is negative (see --help)\n"},
      {{"--steps", "99999999999999999999999"}, "prog: --steps: '99999999999999999999999' does not fit in 64 bits (see --help)\n"},
  };
  for (const auto& [args, message] : cases) {
    Outcome o = run_prog(args, succeed);
    EXPECT_EQ(o.code, 2) << args[0];
    EXPECT_EQ(o.err, message);
    EXPECT_FALSE(o.ran) << args[0];
  }
}

TEST(ProgramMain, HelpExits0OnStdout) {
  Outcome o = run_prog({"--help"}, succeed);
  EXPECT_EQ(o.code, 0);
  EXPECT_FALSE(o.ran);
  EXPECT_NE(o.out.find("prog: a test program"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("--steps"), std::string::npos) << o.out;
}

TEST(ProgramMain, BadInitOptionsAreAUsageError) {
  Outcome o = run_prog({}, succeed, []() -> dist::InitOptions { throw UsageError("--device cuda: no CUDA device"); });
  EXPECT_EQ(o.code, 2);
  EXPECT_EQ(o.err, "prog: --device cuda: no CUDA device\n");
  EXPECT_FALSE(o.ran);
}

// Sets an environment variable for one scope, then puts back what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// A bad value used to abort in libomp (OMP_NUM_THREADS=abc: an assertion, exit 134) or fail
// part way in (ZDL_CPU_GEMM at the first product; the dist variables exited 1 with the check's
// source line): now bad input, said before the program runs.
TEST(ProgramMain, BadEnvironmentVariablesExit2BeforeTheProgramRuns) {
  const struct {
    const char* name;
    const char* value;
    const char* says;
  } cases[] = {
      {"OMP_NUM_THREADS", "abc", "prog: OMP_NUM_THREADS='abc' is not a number of threads"},
      {"OMP_NUM_THREADS", "-3", "prog: OMP_NUM_THREADS='-3' is not a number of threads"},
      {"OMP_NUM_THREADS", "1.5", "prog: OMP_NUM_THREADS='1.5' is not a number of threads"},
      {"OMP_NUM_THREADS", "0", "prog: OMP_NUM_THREADS='0' asks for no threads: give 1 or more"},
      {"OMP_NUM_THREADS", "99999999", "prog: OMP_NUM_THREADS='99999999' is more than 16 threads for each of"},
      {"ZDL_CPU_GEMM", "bogus", "prog: ZDL_CPU_GEMM: a CPU GEMM back end is eigen, avx2, avx512 or onednn, got 'bogus'\n"},
      {"ZDL_COLLECTIVE_TIMEOUT_S", "abc", "prog: ZDL_COLLECTIVE_TIMEOUT_S='abc' is not a positive number of seconds"},
      {"ZDL_DIST_BACKEND", "gloo", "prog: dist::init: unknown backend 'gloo' (from ZDL_DIST_BACKEND)"},
      {"ZDL_RANKS_PER_NODE", "x", "prog: ZDL_RANKS_PER_NODE='x' is not a positive number of ranks"},
  };
  for (const auto& c : cases) {
    ScopedEnv env(c.name, c.value);
    Outcome o = run_prog({}, succeed);
    EXPECT_EQ(o.code, 2) << c.name << "=" << c.value;
    EXPECT_FALSE(o.ran);
    EXPECT_EQ(o.err.rfind(c.says, 0), 0u) << o.err;
    EXPECT_EQ(o.err.find(" failed at "), std::string::npos) << o.err;  // no source line
  }
  for (const char* fine : {"1", " 2 ", "2,1"}) {
    ScopedEnv env("OMP_NUM_THREADS", fine);
    EXPECT_EQ(run_prog({}, succeed).code, 0) << fine;
  }
}

TEST(ProgramMain, AgreeOnUsageOnOneRankRethrows) {
  Outcome o = run_prog({}, [](dist::Communicator& comm) {
    agree_on_usage(comm, [] {});  // nothing wrong: goes on
    agree_on_usage(comm, [] { throw UsageError("--save: cannot write in '/proc'"); });
    return 0;
  });
  EXPECT_EQ(o.code, 2);
  EXPECT_EQ(o.err, "prog: --save: cannot write in '/proc'\n");
}

TEST(ProgramFlags, ShortParseMessageSaysUnboundedRangesBriefly) {
  const std::string huge(309, '9');
  EXPECT_EQ(short_parse_message("--lr: Value -1 not in range 0.000000 to " + huge + ".000000"), "--lr: -1 must not be negative");
  EXPECT_EQ(short_parse_message("--steps: Value 0 not in range 0.000000 to " + huge), "--steps: 0 must be positive");
  EXPECT_EQ(short_parse_message("--zero-stage: Value 5 not in range 0 to 3"), "--zero-stage: Value 5 not in range 0 to 3");
  // Not a number at all: strtod reads "1" of "1K" (it said "1K must not be negative").
  EXPECT_EQ(short_parse_message("--lr: Value 1K not in range 0.000000 to " + huge), "--lr: 1K is not a number");
  EXPECT_EQ(short_parse_message("--lr: Value abc not in range 0.000000 to " + huge), "--lr: abc is not a number");
}

TEST(ProgramFlags, ByteSizesTakeBinaryUnits) {
  std::string why;
  EXPECT_EQ(parse_byte_size("4096", &why), 4096);
  EXPECT_EQ(parse_byte_size("512K", &why), 512 * 1024);
  EXPECT_EQ(parse_byte_size("2g", &why), int64_t{2} << 30);
  EXPECT_EQ(parse_byte_size("1.5GiB", &why), int64_t{3} << 29);
  EXPECT_EQ(parse_byte_size(" 64 MB ", &why), int64_t{64} << 20);
  EXPECT_EQ(parse_byte_size("10b", &why), 10);
  EXPECT_EQ(parse_byte_size("0", &why), 0);
  for (const char* bad : {"", "-5", "1e3", "abc", "1K2", "5X", "nan", "1..5M"}) {
    why.clear();
    EXPECT_EQ(parse_byte_size(bad, &why), std::nullopt) << bad;
    EXPECT_EQ(why, "'" + std::string(bad) + "' is not a size in bytes (a number, optionally with a unit: 4096, 512K, 2G, "
                     "1.5GiB)");
  }
  EXPECT_EQ(parse_byte_size("99999999999T", &why), std::nullopt);
  EXPECT_EQ(why, "'99999999999T' is too large a size in bytes");
}

TEST(FatalReport, OneRankAlwaysSpeaks) {
  Outcome o = run_prog({}, [](dist::Communicator& comm) {
    FatalReport report(comm);
    EXPECT_TRUE(report.first_to_say("out of memory"));
    EXPECT_TRUE(report.first_to_say("out of memory"));  // no other rank to have said it
    report.before_abort();
    return 0;
  });
  EXPECT_EQ(o.code, 0);
}

}  // namespace
}  // namespace zdl::io

// Temporary files a signal must not leave behind (io/temporary_files.h): a child process holding
// an AtomicFileWriter's temporary file is ended by a signal, and the file is gone. Each case
// runs in a forked child, so the signal ends the child, not the test.
#include "io/temporary_files.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "io/file.h"
#include "temp_dir.h"

namespace zdl::io {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  return out;
}

// Forks a child that stages two files (one committed, one not) and raises `sig` with or without
// a RemoveTemporariesOnSignal; returns how the child ended (waitpid's status).
int child_stages_then_gets(int sig, bool cleanup, const std::string& dir) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    {
      std::optional<RemoveTemporariesOnSignal> scope;
      if (cleanup) scope.emplace("test");
      AtomicFileWriter done(dir + "/done.bin");
      done.write("x", 1);
      done.commit();
      AtomicFileWriter staged(dir + "/shard.bin");
      staged.write("abc", 3);
      staged.close();  // closed, not committed: as prepare_tokens stages its shards
      ::raise(sig);
    }
    ::_exit(0);  // not reached when the signal ends the child
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

TEST(RemoveTemporariesOnSignal, ASignalRemovesTheStagedFilesAndEndsTheProcessByIt) {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    testing::TempDir dir;
    const int status = child_stages_then_gets(sig, /*cleanup=*/true, dir.path());
    ASSERT_TRUE(WIFSIGNALED(status)) << sig;
    EXPECT_EQ(WTERMSIG(status), sig);  // the shell still sees 128 + sig
    EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"done.bin"}) << sig;  // the committed file stays
  }
}

// Without the scope the signal leaves the temporary behind: what the scope is for.
TEST(RemoveTemporariesOnSignal, WithoutItTheTemporaryStays) {
  testing::TempDir dir;
  const int status = child_stages_then_gets(SIGTERM, /*cleanup=*/false, dir.path());
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(names_in(dir.path()).size(), 2u);
}

TEST(RemoveTemporariesOnSignal, AFullListIsRefusedAndFreedSlotsAreReused) {
  std::vector<int> slots;
  const std::string path = "/nonexistent/x";
  for (int s; (s = list_temporary(path.c_str())) >= 0;) slots.push_back(s);
  EXPECT_GE(slots.size(), 200u);  // writers listed by other tests may hold a few
  forget_temporary(slots.back());
  EXPECT_EQ(list_temporary(path.c_str()), slots.back());
  for (int s : slots) forget_temporary(s);
}

}  // namespace
}  // namespace zdl::io

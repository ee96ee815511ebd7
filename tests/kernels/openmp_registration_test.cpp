// A process whose pid matches a stale, empty or all-zero libomp registration file in /dev/shm
// (left by a process killed while starting OpenMP) still runs its parallel regions:
// kernels/cpu/openmp_registration.cpp removes the file before main. Without it the first
// OpenMP call dies with SIGBUS (empty file) or libomp's "duplicate runtime" error (zeros).
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <omp.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace {

constexpr const char* kChildTest = "OpenMpRegistration.ParallelRegionSumsOnEveryThread";

// Writes "/dev/shm/__KMP_REGISTERED_LIB_<pid>_<uid>" into buf with async-signal-safe code
// (it runs between fork and exec).
void registration_path(char* buf, long pid, long uid) {
  const char* prefix = "/dev/shm/__KMP_REGISTERED_LIB_";
  char* p = buf;
  while (*prefix) *p++ = *prefix++;
  for (long v : {pid, uid}) {
    char digits[24];
    int n = 0;
    do digits[n++] = static_cast<char>('0' + v % 10); while ((v /= 10) > 0);
    while (n > 0) *p++ = digits[--n];
    *p++ = '_';
  }
  p[-1] = '\0';
}

// Forks a child that plants a registration file of `size` zero bytes under its own pid, then
// execs this binary to run kChildTest. Returns the child's wait status.
int run_child_over_stale_file(off_t size) {
  const pid_t child = ::fork();
  if (child == 0) {
    char path[96];
    registration_path(path, static_cast<long>(::getpid()), static_cast<long>(::getuid()));
    const int fd = ::open(path, O_CREAT | O_TRUNC | O_WRONLY, 0666);
    if (fd < 0 || ::ftruncate(fd, size) != 0) ::_exit(90);
    ::close(fd);
    std::string filter = std::string("--gtest_filter=") + kChildTest;
    char* argv[] = {const_cast<char*>("/proc/self/exe"), filter.data(), nullptr};
    ::execv("/proc/self/exe", argv);
    ::_exit(91);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  char path[96];
  registration_path(path, static_cast<long>(child), static_cast<long>(::getuid()));
  ::unlink(path);  // the child's own registration, if its libomp died before removing it
  return status;
}

TEST(OpenMpRegistration, ParallelRegionSumsOnEveryThread) {
  omp_set_num_threads(2);
  long sum = 0;
#pragma omp parallel for reduction(+ : sum)
  for (long i = 1; i <= 1000; ++i) sum += i;
  EXPECT_EQ(sum, 500500);
}

TEST(OpenMpRegistration, StaleFileOfThisPidDoesNotKillTheProcess) {
  struct stat st;
  if (::stat("/dev/shm", &st) != 0) GTEST_SKIP() << "no /dev/shm: libomp registers elsewhere";
  for (off_t size : {off_t{0}, off_t{1024}}) {
    const int status = run_child_over_stale_file(size);
    ASSERT_NE(WEXITSTATUS(status), 90) << "could not plant the file";
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "a " << size << "-byte stale file: "
        << (WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status))
                                : "exit " + std::to_string(WEXITSTATUS(status)));
  }
}

}  // namespace

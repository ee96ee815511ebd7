// A child process that holds io::DirLock(dir) until killed: "another run" for the tests of
// what a second writer meets. The child is SIGKILLed (never ends normally), so the kernel, not
// the holder, releases the lock, as after a crash.
#pragma once
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdexcept>
#include <string>

#include "io/dir_lock.h"

namespace zdl::testing {

class LockHolderProcess {
 public:
  explicit LockHolderProcess(const std::string& dir) {
    int ready[2];
    if (::pipe(ready) != 0) throw std::runtime_error("pipe failed");
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      io::DirLock held(dir);
      const char c = 1;
      if (::write(ready[1], &c, 1) != 1) ::_exit(3);
      ::pause();  // held until killed
      ::_exit(0);
    }
    char c = 0;
    const bool locked = ::read(ready[0], &c, 1) == 1;
    ::close(ready[0]);
    ::close(ready[1]);
    if (!locked) {
      kill();
      throw std::runtime_error("the child could not take the lock of '" + dir + "'");
    }
  }
  ~LockHolderProcess() { kill(); }
  LockHolderProcess(const LockHolderProcess&) = delete;
  LockHolderProcess& operator=(const LockHolderProcess&) = delete;

  pid_t pid() const { return pid_; }
  // SIGKILL, and wait for the child to be gone.
  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
};

}  // namespace zdl::testing

#include "io/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <set>

#include "core/check.h"
#include "io/checkpoint_dir.h"

namespace zdl::io {

namespace {

// "host 'h', pid 123, since 2026-11-26 10:00:00 UTC": what the holder wrote into the lock file.
std::string holder_of(int fd) {
  char buf[512] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string s(buf, n > 0 ? static_cast<size_t>(n) : 0);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  return s.empty() ? "a process that has not written its name yet" : s;
}

std::string this_process() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "?");
  char when[64] = {};
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return detail::str("host '", host, "', pid ", ::getpid(), ", since ", when);
}

// The lock files this process holds, by absolute path.
std::mutex held_mutex;
std::set<std::string>& held_paths() {
  static std::set<std::string> paths;
  return paths;
}
std::string held_key(const std::string& lock_path) {
  return std::filesystem::absolute(lock_path).lexically_normal().string();
}

}  // namespace

bool DirLock::held_here(const std::string& dir) {
  std::lock_guard<std::mutex> g(held_mutex);
  return held_paths().count(held_key(checkpoint_sibling(dir, ".lock"))) > 0;
}

DirLock::DirLock(const std::string& dir) : path_(checkpoint_sibling(dir, ".lock")) {
  std::error_code ec;
  std::filesystem::create_directories(checkpoint_parent(dir), ec);
  // A holder removes the file when it lets go, so the file locked may have been unlinked between
  // open and flock: then the path names another file (or none), and the claim starts again.
  for (;;) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    const int open_err = errno;
    if (fd_ < 0)
      throw Error(detail::str("cannot create the lock file '", path_, "' for '", dir, "': ", std::strerror(open_err)));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      const std::string holder = err == EWOULDBLOCK ? holder_of(fd_) : std::string();
      ::close(fd_);
      fd_ = -1;
      // The user's input, not a code location: the message alone.
      if (err == EWOULDBLOCK)
        throw Error(detail::str("'", dir, "' is in use by another run (", holder,
                                "); two runs writing one directory would destroy each other's files: wait for that "
                                "run to end, or choose another directory"));
      throw Error(detail::str("cannot lock '", path_, "' for '", dir, "': ", std::strerror(err)));
    }
    struct stat held {}, named {};
    if (::fstat(fd_, &held) == 0 && ::stat(path_.c_str(), &named) == 0 && held.st_dev == named.st_dev &&
        held.st_ino == named.st_ino)
      break;
    ::close(fd_);
    fd_ = -1;
  }
  {
    std::lock_guard<std::mutex> g(held_mutex);
    held_paths().insert(held_key(path_));
  }
  const std::string me = this_process() + "\n";
  // Best effort: the name only makes a contender's message clearer; the flock is the lock.
  [[maybe_unused]] const bool named =
      ::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, me.data(), me.size(), 0) == static_cast<ssize_t>(me.size());
}

DirLock::~DirLock() {
  if (fd_ < 0) return;
  {
    std::lock_guard<std::mutex> g(held_mutex);
    held_paths().erase(held_key(path_));
  }
  ::unlink(path_.c_str());  // while still held: a contender that opened it sees it gone and starts again
  ::close(fd_);             // closing the last descriptor releases the flock
}

}  // namespace zdl::io

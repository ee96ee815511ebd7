#include "io/fatal_report.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

namespace zdl::io {

namespace {

std::string without_rank(const std::string& m) {
  if (m.rfind("[rank ", 0) != 0) return m;
  const auto end = m.find("] ");
  return end == std::string::npos ? m : m.substr(end + 2);
}

}  // namespace

FatalReport::FatalReport(dist::Communicator& comm) {
  if (comm.size() == 1) return;
  std::string key;
  if (comm.rank() == 0) key = detail::str(std::hex, std::random_device{}(), std::random_device{}(), "-", ::getpid());
  path_ = (std::filesystem::temp_directory_path() / ("zdl-fatal-" + comm.broadcast_string(key, 0))).string();
}

bool FatalReport::first_to_say(const std::string& message) const {
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

void FatalReport::before_abort() const {
  if (!created_) return;
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ::unlink(path_.c_str());
}

}  // namespace zdl::io

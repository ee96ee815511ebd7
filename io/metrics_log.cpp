#include "io/metrics_log.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "core/check.h"

namespace zdl::io {

namespace {

// Whether an existing file is a metrics log to append to: its first line is a JSON object with a
// "type" or a "step" (every line a run writes has one), or the whole file is one torn line that
// starts as an object. Anything else (the training data, JSON-lines data, a results file, a
// checkpoint's pretty-printed layout.json) is someone else's file, not to be appended to.
bool looks_like_a_metrics_log(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string first;
  if (!std::getline(in, first)) return true;  // unreadable here: opening it says why
  if (in.eof()) return !first.empty() && first.front() == '{';
  const nlohmann::json j = nlohmann::json::parse(first, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && (j.contains("type") || j.contains("step"));
}

// Whether a regular file's last byte is not a newline: a run killed mid-line left it torn.
bool ends_torn(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in || in.tellg() <= 0) return false;
  in.seekg(-1, std::ios::end);
  char last = '\n';
  return in.get(last) && last != '\n';
}

[[noreturn]] void cannot_open(const std::string& path, const std::string& why) {
  throw Error(detail::str("cannot open metrics file '", path, "' for appending: ", why));
}

std::FILE* open_for_appending(const std::string& path) {
  struct stat st {};
  const bool exists = ::stat(path.c_str(), &st) == 0;
  const bool fifo = exists && S_ISFIFO(st.st_mode), regular = exists && S_ISREG(st.st_mode);
  if (exists && S_ISDIR(st.st_mode)) cannot_open(path, "it is a directory; give a file's path");
  if (regular && st.st_size > 0 && !looks_like_a_metrics_log(path))
    cannot_open(path, "it exists and is not a metrics log (its first line is not a JSON object with a \"type\" or a "
                      "\"step\"); give a new file, "
                      "or an earlier run's metrics to append to");
  const bool torn = regular && ends_torn(path);
  // A FIFO opens for writing only once a reader has it open: without O_NONBLOCK the run would wait
  // for one, silently, before its first step.
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | (fifo ? O_NONBLOCK : 0), 0666);
  if (fd < 0 && fifo && errno == ENXIO) cannot_open(path, "it is a FIFO that no process reads; start its reader first");
  if (fd < 0) cannot_open(path, std::strerror(errno));
  if (fifo) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::FILE* file = ::fdopen(fd, "a");
  if (!file) {
    const int e = errno;
    ::close(fd);
    cannot_open(path, std::strerror(e));
  }
  // The torn last line is ended first, so that this run's first line is a line of its own.
  errno = 0;
  if (torn && (std::fputc('\n', file) == EOF || std::fflush(file) != 0)) {
    const std::string why = errno ? std::strerror(errno) : "write error";
    std::fclose(file);
    throw Error(detail::str("cannot write the metrics file '", path, "': ", why));
  }
  return file;
}

}  // namespace

MetricsLog::MetricsLog(std::string path, int rank, bool all_ranks) {
  if (path.empty() || (rank > 0 && !all_ranks)) return;
  if (rank > 0) {
    const auto dot = path.find_last_of('.'), slash = path.find_last_of('/');
    const std::string suffix = ".rank" + std::to_string(rank);
    if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) path += suffix;
    else path.insert(dot, suffix);
  }
  file_ = open_for_appending(path);
  path_ = std::move(path);
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::write(const nlohmann::json& line) {
  if (!file_) return;
  const std::string text = line.dump() + "\n";
  // A FIFO whose reader went away raises SIGPIPE, which ended the run without a word (exit 141):
  // blocked for this write, the write fails with EPIPE instead and says so like any other write
  // error; the signal it left pending is taken back.
  sigset_t pipe_signal, before;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_signal, &before);
  errno = 0;
  const bool ok = std::fwrite(text.data(), 1, text.size(), file_) == text.size() && std::fflush(file_) == 0;
  const int err = errno;
  if (err == EPIPE && !sigismember(&before, SIGPIPE)) {
    const timespec now{0, 0};
    (void)sigtimedwait(&pipe_signal, nullptr, &now);
  }
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  if (!ok) throw Error(detail::str("cannot write the metrics file '", path_, "': ", err ? std::strerror(err) : "write error"));
}

}  // namespace zdl::io

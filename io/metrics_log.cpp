#include "io/metrics_log.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "core/check.h"

namespace zdl::io {

MetricsLog::MetricsLog(std::string path, int rank, bool all_ranks) {
  if (path.empty() || (rank > 0 && !all_ranks)) return;
  if (rank > 0) {
    const auto dot = path.find_last_of('.'), slash = path.find_last_of('/');
    const std::string suffix = ".rank" + std::to_string(rank);
    if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) path += suffix;
    else path.insert(dot, suffix);
  }
  // A run killed mid-line left its last line torn: it is ended first, so that this run's first
  // line is a line of its own and parses. (A file this process may only write is not read.)
  const bool torn = [&] {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in || in.tellg() <= 0) return false;
    in.seekg(-1, std::ios::end);
    char last = '\n';
    return in.get(last) && last != '\n';
  }();
  file_ = std::fopen(path.c_str(), "a");
  if (!file_) throw Error(detail::str("cannot open metrics file '", path, "' for appending: ", std::strerror(errno)));
  path_ = std::move(path);
  errno = 0;
  if (torn && (std::fputc('\n', file_) == EOF || std::fflush(file_) != 0)) {
    const std::string why = errno ? std::strerror(errno) : "write error";
    std::fclose(file_);
    file_ = nullptr;
    throw Error(detail::str("cannot write the metrics file '", path_, "': ", why));
  }
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::write(const nlohmann::json& line) {
  if (!file_) return;
  const std::string text = line.dump() + "\n";
  errno = 0;
  const bool ok = std::fwrite(text.data(), 1, text.size(), file_) == text.size() && std::fflush(file_) == 0;
  if (!ok) throw Error(detail::str("cannot write the metrics file '", path_, "': ", errno ? std::strerror(errno) : "write error"));
}

}  // namespace zdl::io

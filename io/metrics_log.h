// A JSON-lines log of a run (one object per line: config, steps, evaluations), flushed after
// every line so a crashed run keeps what it logged. A write that fails (a full disk, an I/O
// error) throws naming the file: a run never ends "successfully" with a half-written log.
//
//   io::MetricsLog log("run.jsonl", comm.rank(), /*all_ranks=*/false);
//   log.write({{"step", 1}, {"loss", 3.2}});
#pragma once
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace zdl::io {

class MetricsLog {
 public:
  // Rank 0 appends to `path`; with all_ranks, rank r > 0 appends to `path` with ".rank<r>"
  // before the extension; other ranks (and an empty path) write nothing. Throws if the file
  // cannot be opened for appending, or exists and is not a metrics log (its first line is not a
  // JSON object: the training data, a checkpoint's layout.json), or is a FIFO no process reads.
  MetricsLog(std::string path, int rank, bool all_ranks);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  void write(const nlohmann::json& line);
  // The file this rank writes ("" when none).
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace zdl::io

// The metrics log appends one JSON object per line, and a run appending after one that was
// killed mid-line starts on a line of its own; it appends to nothing but a metrics log, and a
// FIFO without a reader is an error, not a wait.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "io/metrics_log.h"
#include "temp_dir.h"

namespace zdl::io {
namespace {

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST(MetricsLog, AppendsAfterATornLastLineOnALineOfItsOwn) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/run.jsonl";
  {
    std::ofstream out(path);
    out << "{\"step\": 1, \"loss\": 2.5}\n{\"step\": 2, \"lo";  // killed mid-write
  }
  {
    MetricsLog log(path, /*rank=*/0, /*all_ranks=*/false);
    log.write({{"type", "config"}});
  }
  const std::vector<std::string> lines = lines_of(path);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[1], "{\"step\": 2, \"lo");
  EXPECT_EQ(lines[2], "{\"type\":\"config\"}");
}

TEST(MetricsLog, AppendsToACompleteFileAndStartsAnEmptyOne) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/run.jsonl";
  for (int run = 0; run < 2; ++run) {
    MetricsLog log(path, /*rank=*/0, /*all_ranks=*/false);
    log.write({{"type", "config"}, {"run", run}});
  }
  EXPECT_EQ(lines_of(path), (std::vector<std::string>{"{\"run\":0,\"type\":\"config\"}", "{\"run\":1,\"type\":\"config\"}"}));
}

std::string error_of_opening(const std::string& path) {
  try {
    MetricsLog log(path, /*rank=*/0, /*all_ranks=*/false);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// --metrics naming the training data or a checkpoint's layout.json used to append to it.
TEST(MetricsLog, RefusesToAppendToAFileThatIsNotAMetricsLog) {
  testing::TempDir dir;
  for (const std::string text : {"First Citizen:\nBefore we proceed any further, hear me speak.\n",
                                 "{\n  \"step\": 4,\n  \"world\": 2\n}\n", "[1, 2]\n", "not json at all",
                                 // JSON-lines data and a results file: objects, but not a run's lines
                                 "{\"prompt\": \"q0\"}\n{\"prompt\": \"q1\"}\n", "{\"model\": \"x\", \"acc\": 0.9}\n"}) {
    const std::string path = dir.path() + "/other.txt";
    std::ofstream(path, std::ios::binary) << text;
    EXPECT_NE(error_of_opening(path).find("it exists and is not a metrics log (its first line is not a JSON object with "
                                          "a \"type\" or a \"step\")"),
              std::string::npos)
        << text;
    EXPECT_EQ(contents(path), text);  // untouched
  }
  // A run killed while writing its first line left one torn line: still a log.
  const std::string torn = dir.path() + "/torn.jsonl";
  std::ofstream(torn, std::ios::binary) << "{\"type\": \"con";
  EXPECT_EQ(error_of_opening(torn), "");
  EXPECT_EQ(contents(torn), "{\"type\": \"con\n");
  EXPECT_NE(error_of_opening(dir.path()).find("it is a directory"), std::string::npos);
}

// A FIFO nobody reads used to block the run before its first step; one with a reader is written.
TEST(MetricsLog, AFifoWithoutAReaderIsRefusedAndOneWithAReaderIsWritten) {
  testing::TempDir dir;
  const std::string fifo = dir.path() + "/metrics.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(error_of_opening(fifo).find("it is a FIFO that no process reads; start its reader first"),
            std::string::npos);
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  {
    MetricsLog log(fifo, /*rank=*/0, /*all_ranks=*/false);
    log.write({{"step", 1}});
  }
  char buf[64] = {};
  const ssize_t n = ::read(reader, buf, sizeof buf);
  ::close(reader);
  EXPECT_EQ(std::string(buf, n > 0 ? static_cast<size_t>(n) : 0), "{\"step\":1}\n");
}

// A FIFO whose reader goes away mid-run: the next write used to end the process by SIGPIPE
// (this test's process too); now it throws the metrics error naming the file, and no SIGPIPE is
// left pending.
TEST(MetricsLog, AFifoWhoseReaderLeftIsAWriteErrorNotASignal) {
  testing::TempDir dir;
  const std::string fifo = dir.path() + "/metrics.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  MetricsLog log(fifo, /*rank=*/0, /*all_ranks=*/false);
  log.write({{"step", 1}});
  ::close(reader);
  std::string message;
  try {
    log.write({{"step", 2}});
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("cannot write the metrics file '" + fifo + "': Broken pipe"), std::string::npos) << message;
  sigset_t pending;
  sigpending(&pending);
  EXPECT_FALSE(sigismember(&pending, SIGPIPE));
}

}  // namespace
}  // namespace zdl::io

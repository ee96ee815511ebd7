// The metrics log appends one JSON object per line, and a run appending after one that was
// killed mid-line starts on a line of its own.
#include <gtest/gtest.h>

#include <fstream>
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
    log.write({{"run", run}});
  }
  EXPECT_EQ(lines_of(path), (std::vector<std::string>{"{\"run\":0}", "{\"run\":1}"}));
}

}  // namespace
}  // namespace zdl::io

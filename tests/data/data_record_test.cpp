// A run's record of its data (data/data_record.h): what a checkpoint keeps, and how data that
// changed since is refused, naming the file and the sizes.
#include "data/data_record.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "error_of.h"
#include "temp_dir.h"

namespace zdl::data {
namespace {

using ::zdl::testing::error_of;
using ::zdl::testing::TempDir;

// The metadata a checkpoint of `files` keeps.
Metadata recorded(const TokenFiles& files) {
  const auto fps = files.file_fingerprints();
  return {{kDataRecordKey, data_record(files, fps)}, {kDataFingerprintKey, combine(fps).to_string()}};
}

// The record of a file holding `before`, which is then rewritten to hold `after`.
Metadata recorded_then_rewritten(const TempDir& dir, const std::string& name, const std::string& before,
                                 const std::string& after) {
  dir.write(name, before);
  const Metadata m = recorded(TokenFiles(dir / name));
  dir.write(name, after);
  return m;
}

TEST(DataRecord, NamesEveryFileInReadingOrder) {
  TempDir dir;
  dir.write("a.txt", "hello");
  const TokenFiles files(dir / "a.txt");
  const auto record = nlohmann::json::parse(recorded(files).at(kDataRecordKey));
  EXPECT_EQ(record.at("source"), dir / "a.txt");
  EXPECT_EQ(record.at("format"), "bytes");
  ASSERT_EQ(record.at("files").size(), 1u);
  EXPECT_EQ(record.at("files")[0].at("tokens"), 5);
  EXPECT_EQ(recorded_file_fingerprints(recorded(files)), files.file_fingerprints());
}

TEST(DataRecord, TheSameDataPasses) {
  TempDir dir;
  dir.write("a.txt", "hello world");
  const TokenFiles files(dir / "a.txt");
  const Metadata m = recorded(files);
  EXPECT_EQ(error_of([&] { check_sizes_match_record(m, files, "the data"); }), "");
  EXPECT_EQ(error_of([&] { check_bytes_match_record(m, files, files.file_fingerprints(), "the data"); }), "");
  EXPECT_EQ(error_of([&] { check_sizes_match_record({}, files, "the data"); }), "");  // nothing recorded
}

TEST(DataRecord, AShorterFileIsNamedWithBothSizes) {
  TempDir dir;
  const Metadata m = recorded_then_rewritten(dir, "a.txt", "hello world", "hello");
  EXPECT_EQ(error_of([&] { check_sizes_match_record(m, TokenFiles(dir / "a.txt"), "--data 'a.txt'"); }),
            "the data file '" + (dir / "a.txt") +
                "' is shorter than when the checkpoint was saved (5 bytes now, 11 then): it changed since the "
                "checkpoint; resume on the data the run was trained on");
}

TEST(DataRecord, ChangedBytesNameTheFile) {
  TempDir dir;
  const Metadata m = recorded_then_rewritten(dir, "a.txt", "hello world", "HELLO world");
  const TokenFiles now(dir / "a.txt");
  const std::string e = error_of([&] { check_bytes_match_record(m, now, now.file_fingerprints(), "the data"); });
  EXPECT_EQ(e.rfind("the data file '" + (dir / "a.txt") + "' changed since the checkpoint (saved size=11 fnv1a=", 0), 0u) << e;
}

// Another file than the checkpoint's, of another size or other bytes: named as another file. It
// was "'b.txt' is longer than when the checkpoint was saved ...: it changed since the
// checkpoint", about a file that never changed.
TEST(DataRecord, AnotherFileIsNamedAsAnotherFileNotAChangedOne) {
  TempDir dir;
  dir.write("a.txt", "hello world");
  const Metadata m = recorded(TokenFiles(dir / "a.txt"));
  const std::string other = "' is not the one the checkpoint was trained on ('" + (dir / "a.txt") +
                            "'); resume on the data the run was trained on (to start from its weights on other data: "
                            "consolidate_checkpoint, then --init-from)";
  dir.write("b.txt", "a longer file");
  EXPECT_EQ(error_of([&] { check_sizes_match_record(m, TokenFiles(dir / "b.txt"), "--data 'b.txt'"); }),
            "the data file '" + (dir / "b.txt") + other);
  dir.write("c.txt", "HELLO WORLD");  // the same size
  const TokenFiles c(dir / "c.txt");
  EXPECT_EQ(error_of([&] { check_sizes_match_record(m, c, "--data 'c.txt'"); }), "");
  EXPECT_EQ(error_of([&] { check_bytes_match_record(m, c, c.file_fingerprints(), "--data 'c.txt'"); }),
            "the data file '" + (dir / "c.txt") + other);
}

TEST(DataRecord, AnotherNumberOfFilesNamesTheSource) {
  TempDir dir;
  dir.write("s_1.txt", "abc");
  const Metadata m = recorded(TokenFiles(dir / "s_1.txt"));
  dir.write("s_2.txt", "def");
  EXPECT_EQ(error_of([&] { check_sizes_match_record(m, TokenFiles(dir / "s_*.txt"), "--data 's_*.txt'"); }),
            "--data 's_*.txt' reads 2 file(s) now, 1 when the checkpoint was saved; resume on the data the run was "
            "trained on");
}

TEST(DataRecord, AnUnreadableRecordIsAnError) {
  TempDir dir;
  dir.write("a.txt", "abc");
  const Metadata m = {{kDataRecordKey, "{\"files\": 3"}};
  EXPECT_EQ(error_of([&] { check_sizes_match_record(m, TokenFiles(dir / "a.txt"), "the data"); })
                .rfind("the checkpoint's record of its data is unreadable: ", 0),
            0u);
}

}  // namespace
}  // namespace zdl::data

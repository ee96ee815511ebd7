// A save or an export swaps its directory whole, so neither may target the working directory or
// one above it (the process and its shell would be left in a deleted directory); a directory
// beside or below it is fine.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "error_of.h"
#include "io/checkpoint_dir.h"
#include "io/hf_dir.h"
#include "temp_dir.h"

namespace zdl::io {
namespace {

namespace fs = std::filesystem;

// Runs in `dir` as the working directory, then returns to the one before.
class InDirectory {
 public:
  explicit InDirectory(const std::string& dir) : before_(fs::current_path()) { fs::current_path(dir); }
  ~InDirectory() { fs::current_path(before_); }
  InDirectory(const InDirectory&) = delete;
  InDirectory& operator=(const InDirectory&) = delete;

 private:
  fs::path before_;
};

TEST(WorkingDirectory, SavesAndExportsRefuseItAndWhatHoldsIt) {
  testing::TempDir tmp;
  const std::string run = tmp.path() + "/run";
  fs::create_directories(run + "/sub");
  InDirectory in(run);
  for (const std::string& dir : {std::string("."), std::string("./"), std::string("../run"), run, run + "/",
                                 tmp.path(), std::string("..")}) {
    SCOPED_TRACE(dir);
    const std::string save = testing::error_of([&] { check_checkpoint_destination(dir, "layout.json"); });
    EXPECT_NE(save.find("working directory"), std::string::npos) << save;
    const std::string out = testing::error_of([&] { check_hf_dir_destination(dir); });  // "." and "..": by name
    EXPECT_TRUE(out.find("working directory") != std::string::npos || out.find("names no directory") != std::string::npos)
        << out;
  }
  for (const std::string& dir : {std::string("ckpt"), std::string("sub/ckpt"), std::string("../beside")}) {
    SCOPED_TRACE(dir);
    EXPECT_NO_THROW(check_checkpoint_destination(dir, "layout.json"));
    EXPECT_NO_THROW(check_hf_dir_destination(dir));
  }
}

}  // namespace
}  // namespace zdl::io

// DirLock: one holder per directory. A second claim, from this process or another, is refused
// naming the holder; the lock goes with its holder, released on destruction and by the kernel
// when the holding process is killed; checkpoint saves (which swap the directory whole) leave it
// in force.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "io/dir_lock.h"
#include "lock_holder_process.h"
#include "temp_dir.h"

namespace zdl::io {

namespace {

using testing::error_of;
using testing::TempDir;

std::string claim_error(const std::string& dir) {
  return error_of([&] { DirLock again(dir); });
}

TEST(DirLock, ASecondClaimIsRefusedNamingTheHolder) {
  TempDir tmp;
  const std::string dir = tmp / "ck";
  {
    DirLock first(dir);
    EXPECT_EQ(first.path(), tmp / ".ck.lock");
    const std::string e = claim_error(dir);
    EXPECT_NE(e.find("'" + dir + "' is in use by another run"), std::string::npos) << e;
    EXPECT_NE(e.find("pid " + std::to_string(::getpid()) + ","), std::string::npos) << e;
    EXPECT_NE(e.find("host '"), std::string::npos) << e;
    EXPECT_NE(claim_error(dir + "/").find("is in use by another run"), std::string::npos) << "'ck/' is 'ck'";
    EXPECT_EQ(claim_error(tmp / "other"), "") << "another directory is free";
  }
  EXPECT_FALSE(std::filesystem::exists(tmp / ".ck.lock")) << "a holder that ends normally leaves no file";
  EXPECT_EQ(claim_error(dir), "") << "released when its holder is destroyed";
}

TEST(DirLock, ReleasedWhenTheHoldingProcessIsKilled) {
  TempDir tmp;
  const std::string dir = tmp / "ck";
  testing::LockHolderProcess holder(dir);
  const std::string e = claim_error(dir);
  EXPECT_NE(e.find("pid " + std::to_string(holder.pid()) + ","), std::string::npos) << e;
  holder.kill();
  EXPECT_TRUE(std::filesystem::exists(tmp / ".ck.lock"));
  EXPECT_EQ(claim_error(dir), "") << "the kernel releases a killed holder's lock; its file is reused";
}

TEST(DirLock, AMissingParentIsCreatedAndAnUnusablePlaceIsAnError) {
  TempDir tmp;
  EXPECT_EQ(claim_error(tmp / "runs/a/ck"), "");
  testing::TempDir other;
  const std::string file = other.write("afile", "x");
  const std::string e = claim_error(file + "/ck");
  EXPECT_NE(e.find("cannot create the lock file"), std::string::npos) << e;
}

}  // namespace

}  // namespace zdl::io

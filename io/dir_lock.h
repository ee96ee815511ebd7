// An exclusive claim on a directory path by one process, for outputs two runs must not share
// (train_gpt's --save). flock(2) on a hidden sibling "<parent>/.<name>.lock": outside the
// directory, because a checkpoint save swaps the directory whole (io/checkpoint_dir.h), and the
// lock must stay on one file across swaps. The kernel drops the lock when its holder exits,
// however it exits, so a crash or a kill never leaves a stale lock to clear by hand (the file
// a killed holder leaves is reused; a holder that ends normally removes it).
//
//   io::DirLock lock("runs/ck");  // throws zdl::Error naming the holder (host, pid, since when)
#pragma once
#include <string>

namespace zdl::io {

class DirLock {
 public:
  explicit DirLock(const std::string& dir);
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

  // The lock file ("<parent>/.<name>.lock").
  const std::string& path() const { return path_; }
  // True while a DirLock of this process holds `dir`: for writers that take the lock themselves
  // unless their caller already holds it (a second DirLock on it would be refused).
  static bool held_here(const std::string& dir);

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace zdl::io

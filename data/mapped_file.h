// MappedFile: a read-only memory map of a whole file (RAII).
//
// Token files can be larger than RAM is comfortable with; mapping them lets the OS page in
// only the windows a batch touches, and N ranks on one host share the same page cache.
// Opening fails with a zdl::Error naming the path and the errno text; an empty file is an
// error too (there is nothing to map, and nothing to train on), and so is anything but a
// regular file (a FIFO is refused without waiting for a writer).
//
// A mapped file truncated by another process would deliver SIGBUS on the next read of its
// lost pages, and one rewritten in place would feed other bytes than the ones fingerprinted:
// check_unchanged() (the dataset calls it before every batch) compares the file's size and
// modification time with those at open and throws, naming the file, if either changed.
// No descriptor stays open (the mapping does not need one): a dataset of thousands of shards
// fits under `ulimit -n`, and check_unchanged() stats the path (the same file: device, inode).
//
//   data::MappedFile f("input.txt");
//   const uint8_t* p = f.data();  int64_t n = f.size();
#pragma once
#include <cstdint>
#include <string>

namespace zdl::data {

class MappedFile {
 public:
  explicit MappedFile(std::string path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;

  const uint8_t* data() const { return data_; }
  int64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Throws if the file's size or modification time differs from when it was opened.
  void check_unchanged() const;

 private:
  void unmap() noexcept;
  std::string path_;
  const uint8_t* data_ = nullptr;
  int64_t size_ = 0;
  uint64_t dev_ = 0, ino_ = 0;  // the file mapped: check_unchanged() stats its path, the descriptor is closed
  int64_t mtime_ns_ = 0;        // at open
};

}  // namespace zdl::data

// MappedFile: a read-only memory map of a whole file (RAII).
//
// Token files can be larger than RAM is comfortable with; mapping them lets the OS page in
// only the windows a batch touches, and N ranks on one host share the same page cache.
// Opening fails with a zdl::Error naming the path and the errno text; an empty file is an
// error too (there is nothing to map, and nothing to train on).
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

 private:
  void unmap() noexcept;
  std::string path_;
  const uint8_t* data_ = nullptr;
  int64_t size_ = 0;
};

}  // namespace zdl::data

// POSIX mmap behind MappedFile; see mapped_file.h.
#include "data/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/check.h"

namespace zdl::data {

namespace {
int64_t mtime_ns(const struct stat& st) { return int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec; }

// Why open() or mmap() failed, and for a per-process limit, which one and how to raise it.
std::string open_failure(int err) {
  if (err == EMFILE) {
    struct rlimit rl {};
    ::getrlimit(RLIMIT_NOFILE, &rl);
    return detail::str(std::strerror(err), ": the process's limit on open files (RLIMIT_NOFILE, ",
                       static_cast<int64_t>(rl.rlim_cur), ") is reached; raise it with 'ulimit -n' (up to the hard "
                       "limit, 'ulimit -Hn')");
  }
  if (err == ENFILE)
    return detail::str(std::strerror(err), ": the system's limit on open files (fs.file-max) is reached");
  return std::strerror(err);
}
}  // namespace

MappedFile::MappedFile(std::string path) : path_(std::move(path)) {
  // O_NONBLOCK: opening a FIFO would otherwise wait for a writer forever (a regular file
  // ignores the flag).
  int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  ZDL_CHECK(fd >= 0, "MappedFile: cannot open '", path_, "': ", open_failure(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    ZDL_CHECK(false, "MappedFile: cannot stat '", path_, "': ", std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    ZDL_CHECK(false, "MappedFile: '", path_, "' is not a regular file");
  }
  if (st.st_size == 0) {
    ::close(fd);
    ZDL_CHECK(false, "MappedFile: '", path_, "' is empty (0 bytes); a data file needs at least one token");
  }
  void* p = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  int err = errno;
  if (p == MAP_FAILED) {
    ::close(fd);
    ZDL_CHECK(false, "MappedFile: cannot mmap '", path_, "' (", st.st_size, " bytes): ", std::strerror(err),
              err == ENOMEM ? " (or the process's number of mappings, vm.max_map_count, is reached)" : "");
  }
  // The mapping outlives the descriptor: closing it lets a dataset hold more files than the
  // process may open at once.
  ::close(fd);
  data_ = static_cast<const uint8_t*>(p);
  size_ = static_cast<int64_t>(st.st_size);
  dev_ = static_cast<uint64_t>(st.st_dev);
  ino_ = static_cast<uint64_t>(st.st_ino);
  mtime_ns_ = mtime_ns(st);
}

void MappedFile::check_unchanged() const {
  struct stat st {};
  // The path now naming another file, or none (replaced by a rename, removed): the mapping
  // still holds the file it was made from, which nothing can truncate through the path any more.
  if (::stat(path_.c_str(), &st) != 0 || static_cast<uint64_t>(st.st_dev) != dev_ ||
      static_cast<uint64_t>(st.st_ino) != ino_)
    return;
  ZDL_CHECK(st.st_size == size_ && mtime_ns(st) == mtime_ns_, "the data file '", path_,
            "' changed during the run (", size_, " bytes at the start, ", st.st_size, " now",
            st.st_size == size_ ? ", rewritten in place" : "",
            "); a run must read the file it started with: restore it, or resume from the last checkpoint on the new one");
}

MappedFile::~MappedFile() { unmap(); }

MappedFile::MappedFile(MappedFile&& o) noexcept
    : path_(std::move(o.path_)),
      data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      dev_(o.dev_),
      ino_(o.ino_),
      mtime_ns_(o.mtime_ns_) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    unmap();
    path_ = std::move(o.path_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    dev_ = o.dev_;
    ino_ = o.ino_;
    mtime_ns_ = o.mtime_ns_;
  }
  return *this;
}

void MappedFile::unmap() noexcept {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), static_cast<size_t>(size_));
  data_ = nullptr;
  size_ = 0;
}

}  // namespace zdl::data

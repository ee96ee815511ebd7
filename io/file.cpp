#include "io/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>
#include <vector>

#include "core/check.h"
#include "io/temporary_files.h"

namespace zdl::io {

namespace {

std::string errno_str() { return std::strerror(errno); }

std::string parent_dir(const std::string& path) {
  std::filesystem::path p(path);
  std::string d = p.parent_path().string();
  return d.empty() ? "." : d;
}

// The process's umask. umask() can only be read by setting it, which races with other threads
// creating files, so it is read from /proc/self/status where Linux has it.
mode_t current_umask() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("Umask:", 0) == 0) return static_cast<mode_t>(std::stoul(line.substr(6), nullptr, 8));
  const mode_t mask = ::umask(0);
  ::umask(mask);
  return mask;
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  std::filesystem::path p(path_);
  ZDL_CHECK(!p.filename().empty(), "AtomicFileWriter: '", path_, "' names no file");
  std::string tmpl = parent_dir(path_) + "/." + p.filename().string() + ".tmp.XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  // Listed before the file exists (mkstemp fills in the name, then creates it): a signal from
  // here on removes it.
  listed_ = list_temporary(buf.data());
  fd_ = ::mkstemp(buf.data());
  if (fd_ < 0) {
    const std::string why = errno_str();
    forget_temporary(std::exchange(listed_, -1));
    ZDL_CHECK(false, "cannot create a temporary file next to '", path_, "' (", tmpl, "): ", why);
  }
  temp_ = buf.data();
  relist_temporary(listed_, temp_.c_str());
  ::fchmod(fd_, 0666 & ~current_umask());
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
  forget_temporary(listed_);
}

void AtomicFileWriter::write(const void* data, size_t n) {
  ZDL_CHECK(fd_ >= 0, "AtomicFileWriter: write to '", path_, "' after commit");
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    ZDL_CHECK(w > 0, "writing '", temp_, "' (for '", path_, "') failed after ", written_, " bytes: ", errno_str());
    p += w;
    n -= static_cast<size_t>(w);
    written_ += static_cast<uint64_t>(w);
  }
}

void AtomicFileWriter::close() {
  ZDL_CHECK(fd_ >= 0, "AtomicFileWriter: '", path_, "' closed twice");
  ZDL_CHECK(::fsync(fd_) == 0, "fsync of '", temp_, "' failed: ", errno_str());
  int rc = ::close(fd_);
  fd_ = -1;
  ZDL_CHECK(rc == 0, "close of '", temp_, "' failed: ", errno_str());
}

void AtomicFileWriter::commit() {
  ZDL_CHECK(!committed_, "AtomicFileWriter: '", path_, "' committed twice");
  if (fd_ >= 0) close();
  rename_path(temp_, path_);
  forget_temporary(std::exchange(listed_, -1));
  committed_ = true;
  fsync_directory(parent_dir(path_));
}

InputFile::InputFile(std::string path) : path_(std::move(path)) {
  // O_NONBLOCK: a FIFO is refused below instead of waiting for a writer (regular files ignore it).
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  ZDL_CHECK(fd_ >= 0, "cannot open '", path_, "': ", errno_str());
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    std::string e = errno_str();
    ::close(fd_);
    ZDL_CHECK(false, "cannot stat '", path_, "': ", e);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    ZDL_CHECK(false, "'", path_, "' is not a regular file");
  }
  size_ = static_cast<uint64_t>(st.st_size);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void InputFile::read_exact(uint64_t offset, void* dst, size_t n, const char* what) const {
  ZDL_CHECK(offset <= size_ && n <= size_ - offset, "'", path_, "': reading ", what, " needs bytes [", offset, ", ",
            offset + n, ") but the file has ", size_);
  char* p = static_cast<char*>(dst);
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd_, p + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    ZDL_CHECK(r >= 0, "reading ", what, " from '", path_, "' failed: ", errno_str());
    ZDL_CHECK(r > 0, "'", path_, "' is truncated: reading ", what, " hit the end of the file at byte ", offset + done,
              " (it shrank while being read?)");
    done += static_cast<size_t>(r);
  }
}

void fsync_directory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ZDL_CHECK(fd >= 0, "cannot open directory '", dir, "' to fsync it: ", errno_str());
  int rc = ::fsync(fd);
  int err = rc == 0 ? 0 : errno;
  ::close(fd);
  // Some file systems (e.g. certain network mounts) refuse fsync on directories; the data
  // files themselves were fsync'ed, so only EINVAL is tolerated.
  ZDL_CHECK(rc == 0 || err == EINVAL, "fsync of directory '", dir, "' failed: ", std::strerror(err));
}

bool exchange_paths(const std::string& a, const std::string& b) {
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0) return true;
  if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) return false;
  ZDL_CHECK(false, "cannot swap '", a, "' and '", b, "': ", errno_str());
  return false;
}

void rename_path(const std::string& from, const std::string& to) {
  ZDL_CHECK(::rename(from.c_str(), to.c_str()) == 0, "cannot rename '", from, "' to '", to, "': ", errno_str());
}

}  // namespace zdl::io

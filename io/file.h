// Files for io/: atomic replacement of a file, checked positional reads, and the directory
// operations checkpoints need. POSIX (Linux) only; every system call is checked and a
// failure throws zdl::Error naming the path and strerror(errno).
//
// Why atomic: a checkpoint is only worth something if a crash (or a full disk, or a kill
// from the scheduler) in the middle of saving leaves the previous one intact. So files are
// written under a temporary name in the same directory (same file system, so rename is
// atomic), fsync'ed, renamed over the target, and the directory is fsync'ed so the rename
// itself is durable.
//
//   io::AtomicFileWriter w("out/model.safetensors");
//   w.write(bytes.data(), bytes.size());
//   w.commit();   // without commit (e.g. an exception), the destructor removes the temp file
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace zdl::io {

class AtomicFileWriter {
 public:
  // Creates "<dir of path>/.<name of path>.tmp.XXXXXX" (mkstemp) with a plain new file's
  // permissions under the process's umask, not mkstemp's 0600 (as torch.save or cp give: a
  // checkpoint or an export another user of the machine can read where the umask allows).
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t n);
  // fsync and close: the data is durable under the temporary name, not yet at `path` (for
  // several files that must appear together: close each, then commit each).
  void close();
  // close (if not yet), rename over the target, fsync the directory.
  void commit();

  const std::string& path() const { return path_; }

 private:
  std::string path_, temp_;
  int listed_ = -1;  // its slot in io/temporary_files.h's list
  int fd_ = -1;
  uint64_t written_ = 0;
  bool committed_ = false;
};

// A file opened read-only; the size is taken once at open (fstat) and reads are checked
// against what the kernel actually returned, so a file that shrinks underneath is reported
// as truncated instead of being read past its end.
class InputFile {
 public:
  explicit InputFile(std::string path);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Reads exactly n bytes at `offset` or throws (naming `what` and the path).
  void read_exact(uint64_t offset, void* dst, size_t n, const char* what) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// fsync on a directory (makes renames and creations in it durable).
void fsync_directory(const std::string& dir);

// Atomically swaps two existing paths (renameat2 RENAME_EXCHANGE). Returns false when the
// file system does not support it (the caller falls back); throws on other errors.
bool exchange_paths(const std::string& a, const std::string& b);

// rename(2), checked.
void rename_path(const std::string& from, const std::string& to);

}  // namespace zdl::io

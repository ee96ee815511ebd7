#include "dist/offload/nvme_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/check.h"
#include "core/memory.h"

namespace zdl::dist {

namespace {

constexpr int64_t kAlign = 4096;         // region alignment, and O_DIRECT's block
constexpr int64_t kBounce = 4 << 20;     // an I/O thread's bounce buffer for unaligned transfers

// The calling I/O thread's bounce buffer, kAlign-aligned.
char* bounce_buffer() {
  struct Buffer {
    char* p = static_cast<char*>(std::aligned_alloc(kAlign, kBounce));
    ~Buffer() { std::free(p); }
  };
  thread_local Buffer b;
  if (!b.p) throw OutOfMemoryError("out of host memory allocating the offload bounce buffer");
  return b.p;
}

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kAlign == 0; }

std::string errno_text(int e) { return std::strerror(e); }

// The disk's errors are the environment's, not the code's: no source location in the message.
template <class... Args>
[[noreturn]] void fail(const Args&... args) {
  throw Error(detail::str(args...));
}

}  // namespace

NvmeStore::NvmeStore(std::string dir, std::string prefix, bool direct, int io_threads)
    : dir_(std::move(dir)), prefix_(std::move(prefix)) {
  namespace fs = std::filesystem;
  if (dir_.empty()) fail(prefix_, " offload: no offload directory given (--offload-dir)");
  std::error_code ec;
  if (!fs::is_directory(dir_, ec))
    fail(prefix_, " offload: '", dir_,
         "' is not a directory; create it (a local NVMe or SSD path) or name another with --offload-dir");
  // An unnamed file where the filesystem can make one (nothing to clean up, ever); elsewhere a
  // unique name, unlinked at once. Either way the kernel frees the blocks when the process ends.
  fd_ = ::open(dir_.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd_ < 0) {
    std::string path = (fs::path(dir_) / "zerodl-offload.XXXXXX").string();
    fd_ = ::mkostemp(path.data(), O_CLOEXEC);
    if (fd_ < 0) fail(prefix_, " offload: cannot create a scratch file in '", dir_, "': ", errno_text(errno));
    ::unlink(path.c_str());
  }
  // Linux sets O_DIRECT on an open file; a filesystem without it refuses with EINVAL.
  if (direct) {
    const int flags = ::fcntl(fd_, F_GETFL);
    direct_ = flags >= 0 && ::fcntl(fd_, F_SETFL, flags | O_DIRECT) == 0;
  }
  for (int i = 0; i < io_threads; ++i) threads_.emplace_back([this] { worker(); });
}

NvmeStore::~NvmeStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
  if (fd_ >= 0) ::close(fd_);
}

int64_t NvmeStore::reserve(int64_t bytes, const std::string& what) {
  ZDL_CHECK(bytes >= 0, prefix_, " offload: negative size ", bytes, " for ", what);
  const int64_t at = end_;
  const int64_t size = (bytes + kAlign - 1) / kAlign * kAlign;
  if (size > 0) {
    const int e = ::posix_fallocate(fd_, at, size);
    if (e != 0)
      fail(prefix_, " offload: the offload directory '", dir_, "' has no room for ", what, " (",
           format_bytes(bytes), " past the ", format_bytes(at), " already placed there): ", errno_text(e),
           "; free space there or name a larger disk with --offload-dir");
  }
  end_ = at + size;
  return at;
}

std::shared_future<void> NvmeStore::write_async(int64_t offset, const void* src, int64_t bytes) {
  written_ += bytes;
  return transfer(true, offset, const_cast<void*>(src), bytes);
}

std::shared_future<void> NvmeStore::read_async(int64_t offset, void* dst, int64_t bytes) {
  read_ += bytes;
  return transfer(false, offset, dst, bytes);
}

std::shared_future<void> NvmeStore::transfer(bool write, int64_t offset, void* buf, int64_t bytes) {
  return queue([this, write, offset, buf, bytes] {
    if (direct_) move_direct(write, offset, static_cast<char*>(buf), bytes);
    else move(write, offset, static_cast<char*>(buf), bytes);
  });
}

// pwrite or pread until every byte moved (they may move fewer, or be interrupted).
void NvmeStore::move(bool write, int64_t offset, char* p, int64_t bytes) {
  for (int64_t done = 0; done < bytes;) {
    const size_t n = static_cast<size_t>(bytes - done);
    const ssize_t got = write ? ::pwrite(fd_, p + done, n, offset + done) : ::pread(fd_, p + done, n, offset + done);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      fail(prefix_, " offload: ", write ? "writing " : "reading ", bytes, " bytes ", write ? "to" : "from",
           " the scratch file in '", dir_, "' failed: ",
           got < 0 ? errno_text(errno) : write ? "no progress" : "the file is shorter than what was written to it");
    done += got;
  }
}

// Under O_DIRECT: the whole blocks of an aligned buffer straight from memory; the rest (all of an
// unaligned buffer, the last partial block) through the bounce buffer, in whole blocks. The region
// was reserved in whole blocks, so the padding of its last block belongs to it.
void NvmeStore::move_direct(bool write, int64_t offset, char* p, int64_t bytes) {
  int64_t done = 0;
  if (aligned(p)) {
    done = bytes / kAlign * kAlign;
    move(write, offset, p, done);
  }
  char* bounce = bounce_buffer();
  while (done < bytes) {
    const int64_t n = std::min(bytes - done, kBounce), padded = (n + kAlign - 1) / kAlign * kAlign;
    if (write) {
      std::memcpy(bounce, p + done, static_cast<size_t>(n));
      std::memset(bounce + n, 0, static_cast<size_t>(padded - n));
      move(true, offset + done, bounce, padded);
    } else {
      move(false, offset + done, bounce, padded);
      std::memcpy(p + done, bounce, static_cast<size_t>(n));
    }
    done += n;
  }
}

std::shared_future<void> NvmeStore::queue(std::function<void()> job) {
  std::packaged_task<void()> task(std::move(job));
  std::shared_future<void> f = task.get_future().share();
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(task));
  }
  cv_.notify_one();
  return f;
}

void NvmeStore::worker() {
  for (;;) {
    std::packaged_task<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, and every queued job done
      task = std::move(jobs_.front());
      jobs_.pop_front();
    }
    task();  // an exception is stored in the future
  }
}

}  // namespace zdl::dist

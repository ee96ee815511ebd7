// NvmeStore: one rank's scratch file for offloaded model states (ZeRO-Infinity's NVMe tier,
// docs/offload.md), and the I/O threads that read and write it while the cores compute.
//
// Choices:
// - One file per rank in the offload directory, never named (O_TMPFILE) or, where the filesystem
//   cannot make such a file, given a unique name and unlinked at once: the kernel frees its blocks
//   when the process ends, however it ends, so a killed run leaves no debris. Nothing in it
//   outlives a run; checkpoints stay the durable copy (their format does not change).
// - Regions are reserved once, when a state is placed (ZeroPartitioner::wrap, ZeroAdamW's
//   constructor), with posix_fallocate: a directory without room for every state fails then,
//   with a message naming it, never in the middle of a step.
// - pread/pwrite on a small pool of threads: a unit's states move while the previous unit
//   computes. Regions are 4 KiB aligned.
// - Direct I/O (O_DIRECT) by default: the states go to the disk without a second copy in the page
//   cache, which would hold as much host memory as was offloaded and make the disk's bandwidth
//   invisible. O_DIRECT moves whole 4 KiB blocks between 4 KiB-aligned memory and the file: an
//   aligned buffer moves as it is (large CPU allocations are page aligned), anything else (an
//   unaligned start, the last partial block) through a bounce buffer per I/O thread. A filesystem
//   that refuses O_DIRECT (tmpfs on older kernels) gets the page cache; direct() says which.
//
//   dist::NvmeStore store("/scratch/zerodl", comm.prefix());
//   int64_t at = store.reserve(bytes, "exp_avg of unit h.0");
//   store.write_async(at, src, bytes).get(); store.read_async(at, dst, bytes).get();
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace zdl::dist {

class NvmeStore {
 public:
  // Opens the scratch file in `dir` (which must exist and be writable); `prefix` ("[rank r/N]")
  // starts every error message.
  // `direct`: ask for O_DIRECT (kept only where the filesystem accepts it).
  NvmeStore(std::string dir, std::string prefix, bool direct = true, int io_threads = 2);
  ~NvmeStore();  // waits for the I/O in flight
  NvmeStore(const NvmeStore&) = delete;
  NvmeStore& operator=(const NvmeStore&) = delete;

  // A region of `bytes` (allocated on the disk now); its offset. `what` names it in errors.
  int64_t reserve(int64_t bytes, const std::string& what);
  // Queue a copy of [src, src + bytes) to the region at `offset`, or back. The future throws
  // the I/O error; the buffer must stay valid until it is ready.
  std::shared_future<void> write_async(int64_t offset, const void* src, int64_t bytes);
  std::shared_future<void> read_async(int64_t offset, void* dst, int64_t bytes);

  const std::string& dir() const { return dir_; }
  bool direct() const { return direct_; }  // O_DIRECT in effect
  const std::string& prefix() const { return prefix_; }
  int64_t bytes_written() const { return written_; }
  int64_t bytes_read() const { return read_; }

 private:
  std::shared_future<void> transfer(bool write, int64_t offset, void* buf, int64_t bytes);
  void move(bool write, int64_t offset, char* p, int64_t bytes);         // pread/pwrite all of it
  void move_direct(bool write, int64_t offset, char* p, int64_t bytes);  // the same in whole blocks
  std::shared_future<void> queue(std::function<void()> job);
  void worker();

  std::string dir_, prefix_;
  int fd_ = -1;
  bool direct_ = false;
  int64_t end_ = 0;
  int64_t written_ = 0, read_ = 0;  // bytes queued, counted on the caller's thread
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace zdl::dist

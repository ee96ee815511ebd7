#include "core/allocator.h"

#include <atomic>
#include <cstdlib>
#include <limits>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <mutex>
#include <new>
#include <unordered_set>

#include "core/check.h"
#include "core/device_copy.h"

namespace zdl {

namespace {

thread_local bool t_pinned_host = false;

// The page-locked blocks handed out under a PinnedHostScope: a free must go back to the CUDA
// runtime. Looked up only while some exist, so CPU runs never take the lock.
class PinnedBlocks {
 public:
  void add(void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    blocks_.insert(p);
    live_.store(blocks_.size(), std::memory_order_relaxed);
  }
  bool remove(void* p) noexcept {
    if (live_.load(std::memory_order_relaxed) == 0) return false;
    std::lock_guard<std::mutex> lock(mu_);
    const bool found = blocks_.erase(p) > 0;
    live_.store(blocks_.size(), std::memory_order_relaxed);
    return found;
  }

 private:
  std::mutex mu_;
  std::unordered_set<void*> blocks_;
  std::atomic<size_t> live_{0};
};

// Never destroyed: storages freed during static destruction still look it up.
PinnedBlocks& pinned_blocks() {
  static PinnedBlocks* b = new PinnedBlocks;
  return *b;
}

class CpuAllocator final : public Allocator {
 public:
  // glibc hands large blocks (mmap) and the top of its heap back to the kernel on free, so a
  // training step, which frees its activations and allocates them again in the next step, paid
  // page faults and the kernel's zeroing of every fresh page: about 5% of a small GPT's CPU step
  // (bench/run_train_step.sh). Freed memory now stays in the process for reuse, as PyTorch's
  // allocators keep theirs; the memory ledger, which counts tensors, is unchanged.
  CpuAllocator() {
#ifdef __GLIBC__
    mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's maximum: blocks up to 32 MiB come from the heap
    mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
#endif
  }

  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    if (t_pinned_host) {
      void* p = pinned_host_allocate(bytes);
      try {
        pinned_blocks().add(p);
      } catch (...) {
        pinned_host_free(p);
        throw;
      }
      return p;
    }
    // Blocks of 64 KiB and more start on a page: NVMe offload's direct I/O moves them without a
    // bounce copy (dist/offload/nvme_store.h).
    const size_t align = bytes >= (64 << 10) ? 4096 : kCpuAlignment;
    size_t rounded = (bytes + align - 1) / align * align;
    void* p = std::aligned_alloc(align, rounded);
    if (!p) throw OutOfMemoryError(detail::str("out of host memory allocating ", bytes, " bytes"));
    return p;
  }
  void deallocate(void* ptr, size_t) noexcept override {
    if (pinned_blocks().remove(ptr)) pinned_host_free(ptr);
    else std::free(ptr);
  }
};

}  // namespace

PinnedHostScope::PinnedHostScope() : prev_(t_pinned_host) { t_pinned_host = true; }
PinnedHostScope::~PinnedHostScope() { t_pinned_host = prev_; }

Allocator& allocator_for(Device device) {
  static CpuAllocator cpu;
  if (device.is_cpu()) return cpu;
  return cuda_allocator();
}

}  // namespace zdl

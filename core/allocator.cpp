#include "core/allocator.h"

#include <cstdlib>
#include <limits>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <new>

#include "core/check.h"

namespace zdl {

namespace {

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
    // Blocks of 64 KiB and more start on a page: NVMe offload's direct I/O moves them without a
    // bounce copy (dist/offload/nvme_store.h).
    const size_t align = bytes >= (64 << 10) ? 4096 : kCpuAlignment;
    size_t rounded = (bytes + align - 1) / align * align;
    void* p = std::aligned_alloc(align, rounded);
    if (!p) throw OutOfMemoryError(detail::str("out of host memory allocating ", bytes, " bytes"));
    return p;
  }
  void deallocate(void* ptr, size_t) noexcept override { std::free(ptr); }
};

}  // namespace

Allocator& allocator_for(Device device) {
  static CpuAllocator cpu;
  if (device.is_cpu()) return cpu;
  return cuda_allocator();
}

}  // namespace zdl

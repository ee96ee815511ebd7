#include "core/allocator.h"

#include <cstdlib>
#include <new>

#include "core/check.h"

namespace zdl {

namespace {

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    size_t rounded = (bytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    void* p = std::aligned_alloc(kCpuAlignment, rounded);
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

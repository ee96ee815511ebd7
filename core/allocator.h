// Raw byte allocators per device. The CPU allocator aligns to 64 bytes (cache line, AVX-512);
// the CUDA allocator (built with ZDL_CUDA) is stream-ordered. Accounting happens in Storage,
// not here, so every allocator is counted the same way.
#pragma once
#include <cstddef>

#include "core/device.h"

namespace zdl {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes) = 0;
  // Never throws: it runs in destructors, also while an exception unwinds. A failure is
  // recorded and reported by the next synchronize() (core/device.h).
  virtual void deallocate(void* ptr, size_t bytes) noexcept = 0;
};

// The allocator serving a device; throws when the build lacks CUDA.
Allocator& allocator_for(Device device);

// CPU storages allocated on this thread while alive are page-locked (core/device_copy.h), so the
// GPU's copy engine moves them while the host computes (optimizer offload's host tier); freeing
// them later needs no scope. Scopes nest. Plain host memory in a CPU build.
class PinnedHostScope {
 public:
  PinnedHostScope();
  ~PinnedHostScope();
  PinnedHostScope(const PinnedHostScope&) = delete;
  PinnedHostScope& operator=(const PinnedHostScope&) = delete;

 private:
  bool prev_;
};

constexpr size_t kCpuAlignment = 64;

// Implemented in core/cuda_runtime.cpp when ZDL_CUDA is on (core/cuda_stub.cpp throws).
Allocator& cuda_allocator();

}  // namespace zdl

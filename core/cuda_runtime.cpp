// CUDA build: device discovery, the stream-ordered allocator (cudaMallocAsync pools, so a
// freed block is not handed out again before the work queued on its stream has run) and
// byte copies. Streams beyond the default one arrive with the CUDA backend's stream manager.
#include <cuda_runtime.h>

#include <cstring>

#include "core/allocator.h"
#include "core/check.h"
#include "core/cuda_check.h"
#include "core/device_copy.h"

namespace zdl {

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

bool cuda_available() { return cuda_device_count() > 0; }

namespace {

class CudaAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    void* p = nullptr;
    cudaError_t err = cudaMallocAsync(&p, bytes, cudaStreamPerThread);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      throw OutOfMemoryError(detail::str("CUDA out of memory allocating ", bytes, " bytes"));
    }
    ZDL_CUDA_CHECK(err);
    return p;
  }
  void deallocate(void* ptr, size_t) override {
    if (ptr) ZDL_CUDA_CHECK(cudaFreeAsync(ptr, cudaStreamPerThread));
  }
};

}  // namespace

Allocator& cuda_allocator() {
  static CudaAllocator a;
  ZDL_CHECK(cuda_available(), "no CUDA device is visible (CUDA_VISIBLE_DEVICES, driver?)");
  return a;
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
  cudaMemcpyKind kind = dst_device.is_cpu() ? cudaMemcpyDeviceToHost
                        : src_device.is_cpu() ? cudaMemcpyHostToDevice
                                              : cudaMemcpyDeviceToDevice;
  ZDL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, cudaStreamPerThread));
  ZDL_CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread));
}

void zero_bytes(void* dst, Device device, size_t bytes) {
  if (device.is_cpu()) {
    std::memset(dst, 0, bytes);
    return;
  }
  ZDL_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, cudaStreamPerThread));
}

}  // namespace zdl

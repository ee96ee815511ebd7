// Pinned staging buffers and GPU selection (see cuda_staging.h). CUDA runtime calls only in
// the CUDA build.
#include "dist/comm/cuda_staging.h"

#include "core/check.h"
#include "core/memory.h"
#ifdef ZDL_WITH_CUDA
#include "core/cuda_check.h"
#endif

namespace zdl::dist {

#ifdef ZDL_WITH_CUDA

Device select_cuda_device(Device requested, int local_rank, int local_size) {
  const int count = cuda_device_count();
  ZDL_CHECK(count > 0, "select_cuda_device: no CUDA device is visible (CUDA_VISIBLE_DEVICES, driver?)");
  const int index = local_size > 1 ? local_rank % count : requested.index;
  ZDL_CHECK(index >= 0 && index < count, "select_cuda_device: device cuda:", index, " requested but only ", count,
            " device(s) are visible");
  ZDL_CUDA_CHECK(cudaSetDevice(index));
  return Device::cuda(index);
}

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  memory_ledger().on_alloc(Device::cpu(), MemoryCategory::CommBuffer, static_cast<int64_t>(bytes));
  cudaError_t err = cudaMallocHost(&ptr_, bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    memory_ledger().on_free(Device::cpu(), MemoryCategory::CommBuffer, static_cast<int64_t>(bytes));
    throw OutOfMemoryError(detail::str("cudaMallocHost of ", bytes, " bytes (communication staging buffer) failed: ",
                                       cudaGetErrorString(err)));
  }
}

PinnedBuffer::~PinnedBuffer() {
  if (ptr_ == nullptr) return;
  (void)cudaFreeHost(ptr_);  // destructors do not throw; a failure here leaks at worst
  memory_ledger().on_free(Device::cpu(), MemoryCategory::CommBuffer, static_cast<int64_t>(bytes_));
}

#else

Device select_cuda_device(Device requested, int, int) {
  throw Error("select_cuda_device(" + requested.str() + "): this zerodl build has no CUDA support");
}

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
  throw Error("PinnedBuffer: this zerodl build has no CUDA support (CUDA tensors cannot exist here)");
}

PinnedBuffer::~PinnedBuffer() = default;

#endif

}  // namespace zdl::dist

// Host-side helpers for communicators that touch CUDA tensors: choosing this rank's GPU, and
// page-locked (pinned) host buffers through which the MPI backend stages CUDA tensors.
// Pinned bytes are host memory and are accounted on the CPU under MemoryCategory::CommBuffer.
// In a CPU-only build these throw (no CUDA tensor can exist there).
//
//   Device d = select_cuda_device(Device::cuda(), local_rank, local_size);  // cudaSetDevice
//   PinnedBuffer staging(t.nbytes());
#pragma once
#include <cstddef>

#include "core/device.h"

namespace zdl::dist {

// With several ranks on this host, GPU local_rank % device count; else the requested index.
// Makes it current on the calling thread (cudaSetDevice).
Device select_cuda_device(Device requested, int local_rank, int local_size);

class PinnedBuffer {
 public:
  explicit PinnedBuffer(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() const { return ptr_; }
  size_t size() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace zdl::dist

// The CUDA runtime below device.h, implemented by core/cuda_runtime.cpp (or core/cuda_stub.cpp in
// a CPU build): byte copies between devices (host<->CUDA, CUDA<->CUDA; synchronous with respect
// to the host, or queued beside the compute stream), page-locked host memory, and the GPU side of
// device_info and synchronize.
//
// copy_bytes returns when the destination holds the bytes, except for an upload of at most 1 MiB
// from the host: that one is copied into a page-locked staging buffer and queued on this thread's
// compute stream (the source may change at once; work queued after it on that stream, and the
// collectives and copies ordered after that stream, see the new bytes).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/device.h"

namespace zdl {

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);

// [Note: copies beside the compute stream] A copy between page-locked host memory and the current
// GPU queued on a copy stream of its own, so it runs while the compute stream computes (the host
// tier of optimizer offload: gradients leave under the backward, parameters return under the
// next forward). Ordering: the copy starts after everything this thread queued on its compute
// stream so far (it reads what kernels wrote, or overwrites what they read); work queued on the
// compute stream after a copy to the device runs after it. wait_copy() blocks the host until the
// copy is done; the host must not touch either buffer before. Host-to-host: a memcpy, done before
// the call returns (a null ticket).
struct CopyEvent;
using CopyTicket = std::shared_ptr<CopyEvent>;
CopyTicket copy_bytes_async(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
// Blocks until the copy is done (a null ticket: at once); throws the CUDA error it met.
void wait_copy(const CopyTicket& ticket);

// Page-locked host memory (the copy engine moves it while the host computes); plain host memory in
// a CPU build. Throws OutOfMemoryError; the free never throws. CPU storages get it through
// PinnedHostScope (core/allocator.h).
void* pinned_host_allocate(size_t bytes);
void pinned_host_free(void* ptr) noexcept;
// Sets bytes to zero on any device.
void zero_bytes(void* dst, Device device, size_t bytes);
// Name and memory of CUDA device `index`.
DeviceInfo cuda_device_info(int index);
// Waits for this thread's stream on the current GPU; throws the first recorded CUDA error (and
// the first failed deferred check, core/deferred_read.h).
void cuda_synchronize();
// Bytes the current GPU's stream-ordered pool holds from the driver (freed blocks stay in it for
// the next allocation); 0 in a CPU-only build.
int64_t cuda_pool_reserved_bytes();

}  // namespace zdl

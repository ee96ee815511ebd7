// CPU-only build: the CUDA entry points exist and say clearly that CUDA is not compiled in.
#include <cstdlib>
#include <cstring>

#include "core/allocator.h"
#include "core/check.h"
#include "core/deferred_read.h"
#include "core/device_copy.h"

namespace zdl {

bool cuda_available() { return false; }
int cuda_device_count() { return 0; }

Allocator& cuda_allocator() {
  throw Error("this zerodl build has no CUDA support (configure with -DZDL_CUDA=ON and a CUDA toolkit)");
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  ZDL_CHECK(dst_device.is_cpu() && src_device.is_cpu(), "copy ", src_device.str(), " -> ", dst_device.str(),
            ": this zerodl build has no CUDA support");
  std::memcpy(dst, src, bytes);
}

void zero_bytes(void* dst, Device device, size_t bytes) {
  ZDL_CHECK(device.is_cpu(), "zero on ", device.str(), ": this zerodl build has no CUDA support");
  std::memset(dst, 0, bytes);
}

struct CopyEvent {};

CopyTicket copy_bytes_async(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  copy_bytes(dst, dst_device, src, src_device, bytes);
  return nullptr;
}

void wait_copy(const CopyTicket&) {}

void* pinned_host_allocate(size_t bytes) {
  const size_t rounded = (bytes + 4095) / 4096 * 4096;
  void* p = std::aligned_alloc(4096, rounded);
  if (!p) throw OutOfMemoryError(detail::str("out of host memory allocating ", bytes, " bytes"));
  return p;
}

void pinned_host_free(void* ptr) noexcept { std::free(ptr); }

DeviceInfo cuda_device_info(int index) {
  throw Error(detail::str("cuda:", index, ": this zerodl build has no CUDA support"));
}

void cuda_synchronize() {}  // nothing can be queued on a GPU

int64_t cuda_host_waits() { return 0; }
int64_t cuda_pool_reserved_bytes() { return 0; }

// ---- reads the host takes later: on the CPU at once ----

struct DeferredSlot {
  unsigned char bytes[DeferredRead::kMaxBytes] = {};
};

DeferredRead::DeferredRead(const void* src, Device device, size_t bytes) {
  ZDL_CHECK(device.is_cpu(), "DeferredRead from ", device.str(), ": this zerodl build has no CUDA support");
  ZDL_CHECK(bytes <= kMaxBytes, "DeferredRead: at most ", kMaxBytes, " bytes, got ", bytes);
  slot_ = std::make_shared<DeferredSlot>();
  std::memcpy(slot_->bytes, src, bytes);
}

const void* DeferredRead::bytes() const {
  ZDL_CHECK(slot_ != nullptr, "DeferredRead: nothing was queued");
  return slot_->bytes;
}

void defer_check(const void* src, Device device, size_t bytes, DeferredVerdict verdict) {
  DeferredRead read(src, device, bytes);
  std::string message = verdict(read.bytes());
  if (!message.empty()) throw Error(message);
}

void verify_deferred_checks() {}

}  // namespace zdl

// CUDA build: device discovery, the stream-ordered allocator (cudaMallocAsync pools, so a
// freed block is not handed out again before the work queued on its stream has run), byte
// copies (synchronous, and queued beside the compute stream), page-locked host memory, and the
// checks after kernel launches.
//
// Failure handling: a free runs in destructors (also while an exception unwinds), so it never
// throws; its error is recorded (the first one wins), printed once, and thrown by the next
// synchronize(). ZDL_CUDA_SYNC_LAUNCHES=1 synchronizes after every launch, so an asynchronous
// fault is reported by the launch that caused it (slow: for finding a bug, not for training).
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "core/allocator.h"
#include "core/check.h"
#include "core/cuda_check.h"
#include "core/device_copy.h"

namespace zdl {

int cuda_device_count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();  // clear the sticky "no device" error
      return 0;
    }
    return n;
  }();
  return count;
}

bool cuda_available() { return cuda_device_count() > 0; }

namespace {

// The first CUDA error that could not be thrown where it happened.
std::mutex g_error_mutex;
std::string g_recorded_error;

void record_error(const char* call, cudaError_t err) noexcept {
  try {
    std::lock_guard<std::mutex> lock(g_error_mutex);
    if (!g_recorded_error.empty()) return;
    g_recorded_error = detail::str(call, ": CUDA error: ", cudaGetErrorString(err));
    std::fprintf(stderr, "zdl: %s (recorded; reported by the next synchronize)\n", g_recorded_error.c_str());
    std::fflush(stderr);
  } catch (...) {  // out of memory for the message: the error still shows at the next sync
  }
}

void throw_recorded_error() {
  std::string message;
  {
    std::lock_guard<std::mutex> lock(g_error_mutex);
    message.swap(g_recorded_error);
  }
  if (!message.empty()) throw Error(message);
}

bool sync_after_every_launch() {
  static const bool on = [] {
    const char* v = std::getenv("ZDL_CUDA_SYNC_LAUNCHES");
    return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
  }();
  return on;
}

// The current device and its default (stream-ordered) pool; false if the driver says no.
bool current_pool(int* dev, cudaMemPool_t* pool) {
  if (cudaGetDevice(dev) == cudaSuccess && cudaDeviceGetDefaultMemPool(pool, *dev) == cudaSuccess) return true;
  (void)cudaGetLastError();
  return false;
}

// The default pool of each device keeps what it holds: without a release threshold, memory
// freed into the pool goes back to the driver at every synchronization and the next step
// pays cudaMalloc's cost again.
void keep_pool_memory() {
  static std::atomic<uint64_t> configured{0};  // one bit per device (the first 64)
  int dev = 0;
  cudaMemPool_t pool = nullptr;
  if (!current_pool(&dev, &pool) || dev < 0 || dev >= 64) return;
  const uint64_t bit = uint64_t{1} << dev;
  if (configured.load(std::memory_order_relaxed) & bit) return;
  uint64_t keep_all = UINT64_MAX;
  ZDL_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all));
  configured.fetch_or(bit, std::memory_order_relaxed);
}

class CudaAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    keep_pool_memory();
    void* p = nullptr;
    cudaError_t err = cudaMallocAsync(&p, bytes, cudaStreamPerThread);
    if (err == cudaErrorMemoryAllocation) {
      // The pool keeps what it freed; memory others allocate outside it (NCCL, cuBLAS) may be
      // what ran out: give the pool's free memory back to the driver and try once more.
      (void)cudaGetLastError();
      int dev = 0;
      cudaMemPool_t pool = nullptr;
      if (cudaStreamSynchronize(cudaStreamPerThread) == cudaSuccess && current_pool(&dev, &pool) &&
          cudaMemPoolTrimTo(pool, 0) == cudaSuccess)
        err = cudaMallocAsync(&p, bytes, cudaStreamPerThread);
      if (err != cudaSuccess) {
        (void)cudaGetLastError();
        throw OutOfMemoryError(detail::str("CUDA out of memory allocating ", bytes, " bytes"));
      }
    }
    ZDL_CUDA_CHECK(err);
    return p;
  }
  void deallocate(void* ptr, size_t) noexcept override {
    if (!ptr) return;
    const cudaError_t err = cudaFreeAsync(ptr, cudaStreamPerThread);
    if (err != cudaSuccess) {
      record_error("cudaFreeAsync", err);
      (void)cudaGetLastError();  // not to be blamed on the next launch
    }
  }
};

}  // namespace

Allocator& cuda_allocator() {
  static CudaAllocator a;
  ZDL_CHECK(cuda_available(), "no CUDA device is visible (CUDA_VISIBLE_DEVICES, driver?)");
  return a;
}

DeviceInfo cuda_device_info(int index) {
  DeviceInfo info{.name = detail::str("cuda:", index)};
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) {
    (void)cudaGetLastError();
    return info;
  }
  info.name = prop.name;
  info.total_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  return info;
}

void cuda_synchronize() {
  const cudaError_t err = cudaStreamSynchronize(cudaStreamPerThread);
  if (err != cudaSuccess) {
    throw_recorded_error();  // the earlier error is the cause; this one is its echo
    throw Error(detail::str("CUDA error while waiting for the GPU: ", cudaGetErrorString(err),
                            " (set ZDL_CUDA_SYNC_LAUNCHES=1 to find the kernel that caused it)"));
  }
  throw_recorded_error();
}

namespace detail {

void check_launch(const char* file, int line, const char* function) {
  cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess && sync_after_every_launch()) err = cudaStreamSynchronize(cudaStreamPerThread);
  if (err != cudaSuccess)
    throw_error(file, line, function,
                sync_after_every_launch()
                    ? str("CUDA error in the kernel launched by ", function, ": ", cudaGetErrorString(err))
                    : str("CUDA error detected at the launch in ", function, ": ", cudaGetErrorString(err),
                          " (it may come from an earlier kernel; ZDL_CUDA_SYNC_LAUNCHES=1 finds which)"));
}

}  // namespace detail

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

// ---- copies beside the compute stream ([Note: copies beside the compute stream]) ----

struct CopyEvent {
  cudaEvent_t done = nullptr;
  ~CopyEvent() {
    if (done != nullptr) (void)cudaEventDestroy(done);  // legal while the copy still runs
  }
};

namespace {

// The copy stream of the current device, made at its first use (non-blocking: it never waits
// for the legacy default stream).
cudaStream_t copy_stream() {
  static std::mutex mu;
  static std::array<cudaStream_t, 64> streams{};
  int dev = 0;
  ZDL_CUDA_CHECK(cudaGetDevice(&dev));
  ZDL_CHECK(dev >= 0 && dev < 64, "copy stream: device index ", dev, " out of range");
  std::lock_guard<std::mutex> lock(mu);
  if (streams[static_cast<size_t>(dev)] == nullptr)
    ZDL_CUDA_CHECK(cudaStreamCreateWithFlags(&streams[static_cast<size_t>(dev)], cudaStreamNonBlocking));
  return streams[static_cast<size_t>(dev)];
}

cudaEvent_t new_event() {
  cudaEvent_t e = nullptr;
  ZDL_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

// ZDL_CUDA_COPY_DELAY_US=D (tests): every copy beside the compute stream starts D microseconds
// late, so a reader that forgets to wait for one reads stale bytes instead of passing by luck.
void delay_copy_stream(cudaStream_t cs) {
  const char* v = std::getenv("ZDL_CUDA_COPY_DELAY_US");
  const long us = v != nullptr ? std::strtol(v, nullptr, 10) : 0;
  if (us <= 0) return;
  ZDL_CUDA_CHECK(cudaLaunchHostFunc(
      cs, [](void* d) { std::this_thread::sleep_for(std::chrono::microseconds(reinterpret_cast<intptr_t>(d))); },
      reinterpret_cast<void*>(static_cast<intptr_t>(us))));
}

}  // namespace

CopyTicket copy_bytes_async(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return nullptr;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return nullptr;
  }
  ZDL_CHECK(dst_device.is_cpu() != src_device.is_cpu(), "copy_bytes_async ", src_device.str(), " -> ",
            dst_device.str(), ": only copies between the host and a GPU run beside the compute stream");
  const cudaStream_t cs = copy_stream();
  {
    CopyEvent queued{new_event()};  // everything on the compute stream so far comes first
    ZDL_CUDA_CHECK(cudaEventRecord(queued.done, cudaStreamPerThread));
    ZDL_CUDA_CHECK(cudaStreamWaitEvent(cs, queued.done, 0));
  }
  auto ticket = std::make_shared<CopyEvent>();  // made first: a copy queued is always tracked
  ticket->done = new_event();
  delay_copy_stream(cs);
  const cudaMemcpyKind kind = dst_device.is_cpu() ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
  ZDL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, cs));
  ZDL_CUDA_CHECK(cudaEventRecord(ticket->done, cs));
  // The compute stream's later work (a forward reading the parameters) waits for the bytes.
  if (!dst_device.is_cpu()) ZDL_CUDA_CHECK(cudaStreamWaitEvent(cudaStreamPerThread, ticket->done, 0));
  return ticket;
}

void wait_copy(const CopyTicket& ticket) {
  if (!ticket) return;
  const cudaError_t err = cudaEventSynchronize(ticket->done);
  if (err != cudaSuccess) {
    throw_recorded_error();
    throw Error(detail::str("CUDA error while waiting for a copy between host and GPU: ", cudaGetErrorString(err)));
  }
}

void* pinned_host_allocate(size_t bytes) {
  void* p = nullptr;
  const cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    throw OutOfMemoryError(detail::str("cudaHostAlloc of ", bytes, " bytes (page-locked host memory) failed: ",
                                       cudaGetErrorString(err)));
  }
  return p;
}

void pinned_host_free(void* ptr) noexcept {
  const cudaError_t err = cudaFreeHost(ptr);
  if (err != cudaSuccess) record_error("cudaFreeHost", err);
}

void zero_bytes(void* dst, Device device, size_t bytes) {
  if (device.is_cpu()) {
    std::memset(dst, 0, bytes);
    return;
  }
  ZDL_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, cudaStreamPerThread));
}

}  // namespace zdl

// CUDA build: device discovery, the stream-ordered allocator (cudaMallocAsync pools, so a
// freed block is not handed out again before the work queued on its stream has run), byte
// copies (synchronous, and queued beside the compute stream), page-locked host memory, and the
// checks after kernel launches.
//
// Host waits are counted (cuda_host_waits) and each full wait for this thread's compute stream
// judges the deferred checks queued before it ([Note: reads the host takes later],
// core/deferred_read.h). Small copies from the host go through page-locked staging buffers and
// are queued without a wait (the token ids of every micro-batch).
//
// Failure handling: a free runs in destructors (also while an exception unwinds), so it never
// throws; its error is recorded (the first one wins), printed once, and thrown by the next
// synchronize(). ZDL_CUDA_SYNC_LAUNCHES=1 synchronizes after every launch, so an asynchronous
// fault is reported by the launch that caused it (slow: for finding a bug, not for training).
#include <cuda_runtime.h>

#include <algorithm>
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
#include <utility>
#include <vector>

#include "core/allocator.h"
#include "core/check.h"
#include "core/cuda_check.h"
#include "core/deferred_read.h"
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

std::atomic<int64_t> g_host_waits{0};
thread_local uint64_t t_stream_waits = 0;  // this thread's finished waits for its compute stream

struct PendingCheck {
  DeferredRead read;
  DeferredVerdict verdict;
};

// A thread's deferred checks, and the page-locked slots dropped while their copies may still be
// queued (retired until its next wait: a newer copy into one could land first). One object, so
// the checks (declared last) go first at thread exit while the list their slots return to is
// still there; t_thread_alive (trivial, so readable to the end) tells a slot dropped later.
thread_local bool t_thread_alive = false;
struct ThreadChecks {
  std::vector<unsigned char*> retired_slots;
  std::vector<PendingCheck> checks;
  ThreadChecks() { t_thread_alive = true; }
  ~ThreadChecks() {
    checks.clear();
    t_thread_alive = false;
  }
};
thread_local ThreadChecks t_pending;

// More checks than this queued without a wait (a loop that never reads from the GPU) are judged
// by a wait of their own: their errors come within a few steps, and their slots stay bounded.
constexpr size_t kMaxPendingChecks = 64;

// Judges every check queued before this thread's last wait (all of them: a check is queued on
// the compute stream it was made on); throws the first failure's message.
void judge_checks() {
  if (t_pending.checks.empty()) return;
  std::vector<PendingCheck> checks;
  checks.swap(t_pending.checks);
  for (PendingCheck& c : checks) {
    std::string message = c.verdict(c.read.bytes());
    if (!message.empty()) throw Error(message);  // later ones most likely follow from it
  }
}

void free_retired_slots();  // below, with the slots of DeferredRead

// Waits for this thread's compute stream: counted, then the recorded errors and the checks.
void wait_compute_stream(const char* what) {
  g_host_waits.fetch_add(1, std::memory_order_relaxed);
  const cudaError_t err = cudaStreamSynchronize(cudaStreamPerThread);
  if (err != cudaSuccess) {
    t_pending.checks.clear();  // their bytes may never come
    throw_recorded_error();  // the earlier error is the cause; this one is its echo
    throw Error(detail::str("CUDA error while ", what, ": ", cudaGetErrorString(err),
                            " (set ZDL_CUDA_SYNC_LAUNCHES=1 to find the kernel that caused it)"));
  }
  ++t_stream_waits;
  free_retired_slots();
  throw_recorded_error();
  judge_checks();
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
      g_host_waits.fetch_add(1, std::memory_order_relaxed);
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

void cuda_synchronize() { wait_compute_stream("waiting for the GPU"); }

int64_t cuda_host_waits() { return g_host_waits.load(std::memory_order_relaxed); }

int64_t cuda_pool_reserved_bytes() {
  int dev = 0;
  cudaMemPool_t pool = nullptr;
  if (!current_pool(&dev, &pool)) return 0;
  uint64_t bytes = 0;  // the attribute is a cuuint64_t
  ZDL_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &bytes));
  return static_cast<int64_t>(bytes);
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

namespace {

// ---- uploads through page-locked staging buffers ----

// A host-to-GPU copy of at most this many bytes is staged: the bytes are copied into a
// page-locked buffer of the calling thread and the transfer is queued on its compute stream,
// with no wait (the caller may reuse its memory at once). Larger copies wait, as before.
constexpr size_t kStagedUploadBytes = size_t{1} << 20;
// Buffers per thread: a buffer whose transfer is still queued is not reused while fewer than
// this many exist (a step uploads two tensors a micro-batch); past that the oldest is waited for.
constexpr size_t kMaxUploadStages = 32;

struct UploadStage {
  void* host = nullptr;
  size_t capacity = 0;
  cudaEvent_t done = nullptr;  // recorded after the transfer that read `host` last
};

struct UploadStages {
  std::vector<UploadStage> stages;
  size_t oldest = 0;  // the next to wait for when every buffer is in use
  ~UploadStages() {
    for (UploadStage& s : stages) {
      if (s.done != nullptr) (void)cudaEventDestroy(s.done);
      if (s.host != nullptr) (void)cudaFreeHost(s.host);  // waits for the device: at thread exit only
    }
  }
};
thread_local UploadStages t_uploads;

// A buffer of at least `bytes` whose last transfer has run: a free one, a new one, or (all
// kMaxUploadStages in use) the oldest, waited for and grown if it is too small.
UploadStage& upload_stage(size_t bytes) {
  std::vector<UploadStage>& stages = t_uploads.stages;
  for (UploadStage& st : stages)
    if (st.capacity >= bytes && cudaEventQuery(st.done) == cudaSuccess) return st;
  const size_t capacity = std::max<size_t>(bytes, size_t{64} << 10);
  if (stages.size() < kMaxUploadStages) {
    UploadStage st;
    ZDL_CUDA_CHECK(cudaEventCreateWithFlags(&st.done, cudaEventDisableTiming));
    try {
      st.host = pinned_host_allocate(capacity);
    } catch (...) {
      (void)cudaEventDestroy(st.done);
      throw;
    }
    st.capacity = capacity;
    stages.push_back(st);
    return stages.back();
  }
  UploadStage& st = stages[t_uploads.oldest];
  t_uploads.oldest = (t_uploads.oldest + 1) % stages.size();
  g_host_waits.fetch_add(1, std::memory_order_relaxed);
  ZDL_CUDA_CHECK(cudaEventSynchronize(st.done));
  if (st.capacity < bytes) {
    void* bigger = pinned_host_allocate(capacity);
    pinned_host_free(st.host);
    st.host = bigger;
    st.capacity = capacity;
  }
  return st;
}

void staged_upload(void* dst, const void* src, size_t bytes) {
  UploadStage& st = upload_stage(bytes);
  std::memcpy(st.host, src, bytes);
  ZDL_CUDA_CHECK(cudaMemcpyAsync(dst, st.host, bytes, cudaMemcpyHostToDevice, cudaStreamPerThread));
  ZDL_CUDA_CHECK(cudaEventRecord(st.done, cudaStreamPerThread));
}

}  // namespace

// ---- reads the host takes later ([Note: reads the host takes later]) ----

struct DeferredSlot {
  unsigned char* host = nullptr;  // page-locked, for a copy from the GPU
  unsigned char local[DeferredRead::kMaxBytes] = {};  // a CPU source's bytes
  bool ready = false;             // the bytes are on the host
  uint64_t queued_after = 0;      // t_stream_waits when the copy was queued
  std::thread::id thread;
  ~DeferredSlot();
};

namespace {

// Page-locked slots of DeferredRead::kMaxBytes, in slabs kept for the process's life. A slot
// dropped while its copy may still be queued is retired until its thread's next wait (it must
// not take a newer copy that could land first); on another thread it is left unused.
std::mutex g_slot_mutex;
std::vector<unsigned char*> g_free_slots;

unsigned char* take_slot() {
  std::lock_guard<std::mutex> lock(g_slot_mutex);
  if (g_free_slots.empty()) {
    constexpr size_t kSlots = 256;
    auto* slab = static_cast<unsigned char*>(pinned_host_allocate(kSlots * DeferredRead::kMaxBytes));
    for (size_t i = 0; i < kSlots; ++i) g_free_slots.push_back(slab + i * DeferredRead::kMaxBytes);
  }
  unsigned char* p = g_free_slots.back();
  g_free_slots.pop_back();
  return p;
}

void free_retired_slots() {
  std::vector<unsigned char*>& retired = t_pending.retired_slots;
  if (retired.empty()) return;
  std::lock_guard<std::mutex> lock(g_slot_mutex);
  g_free_slots.insert(g_free_slots.end(), retired.begin(), retired.end());
  retired.clear();
}

}  // namespace

DeferredSlot::~DeferredSlot() {
  if (host == nullptr) return;
  const bool same_thread = thread == std::this_thread::get_id() && t_thread_alive;
  const bool landed = ready || (same_thread && t_stream_waits > queued_after);
  try {
    if (landed) {
      std::lock_guard<std::mutex> lock(g_slot_mutex);
      g_free_slots.push_back(host);
    } else if (same_thread) {
      t_pending.retired_slots.push_back(host);
    }  // else: dropped on another thread, or at its thread's exit: left unused
  } catch (...) {  // out of memory for the list: the slot is lost, nothing else
  }
}

DeferredRead::DeferredRead(const void* src, Device device, size_t bytes) {
  ZDL_CHECK(bytes <= kMaxBytes, "DeferredRead: at most ", kMaxBytes, " bytes, got ", bytes);
  auto slot = std::make_shared<DeferredSlot>();
  slot->thread = std::this_thread::get_id();
  slot->queued_after = t_stream_waits;
  (void)&t_pending;  // made now, so a slot dropped before its copy lands can be retired to it
  if (device.is_cpu()) {
    std::memcpy(slot->local, src, bytes);
    slot->ready = true;
  } else {
    slot->host = take_slot();
    ZDL_CUDA_CHECK(cudaMemcpyAsync(slot->host, src, bytes, cudaMemcpyDeviceToHost, cudaStreamPerThread));
  }
  slot_ = std::move(slot);
}

const void* DeferredRead::bytes() const {
  ZDL_CHECK(slot_ != nullptr, "DeferredRead: nothing was queued");
  if (!slot_->ready) {
    ZDL_CHECK(slot_->thread == std::this_thread::get_id(),
              "DeferredRead: read on another thread than the one that queued the copy");
    if (t_stream_waits == slot_->queued_after) wait_compute_stream("reading a value from the GPU");
    slot_->ready = true;
  }
  return slot_->host != nullptr ? slot_->host : slot_->local;
}

void defer_check(const void* src, Device device, size_t bytes, DeferredVerdict verdict) {
  DeferredRead read(src, device, bytes);
  if (device.is_cpu()) {
    std::string message = verdict(read.bytes());
    if (!message.empty()) throw Error(message);
    return;
  }
  t_pending.checks.push_back({std::move(read), std::move(verdict)});
  if (t_pending.checks.size() > kMaxPendingChecks) verify_deferred_checks();
}

void verify_deferred_checks() {
  if (!t_pending.checks.empty()) wait_compute_stream("checking the GPU's inputs");
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
  if (src_device.is_cpu() && bytes <= kStagedUploadBytes) return staged_upload(dst, src, bytes);
  cudaMemcpyKind kind = dst_device.is_cpu() ? cudaMemcpyDeviceToHost
                        : src_device.is_cpu() ? cudaMemcpyHostToDevice
                                              : cudaMemcpyDeviceToDevice;
  ZDL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, cudaStreamPerThread));
  wait_compute_stream("copying between host and GPU");
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
  g_host_waits.fetch_add(1, std::memory_order_relaxed);
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

// [Note: reads the host takes later] A training step needs a few numbers the GPU computes (the
// micro-batches' losses, whether every token id was in range), but a host wait where each is
// made would drain the GPU's queue each time, and the GPU would idle while the host queues the
// next kernels. So those bytes are copied into page-locked host memory on this thread's compute
// stream, and the host reads them after its next wait for that stream (a step has one: the
// gradient norm); only a read that comes first waits itself.
//
// A deferred check is such a read with a verdict: after each wait of this thread for its compute
// stream (synchronize(), a copy from the GPU, item(), an upload of more than 1 MiB), the checks
// queued before it are judged in the order they were made, and the first that failed throws its
// message there, once. A thread that queues many checks without a wait (a loop that never reads
// from the GPU) waits once every 64 checks, so its errors still come and its slots stay bounded.
// A kernel that a failed check guards must stay in bounds on the bad input (an id out of range
// reads nothing); the error then names the input as the op would have.
//
// On the CPU (and in a CPU-only build) reads and checks happen at once.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/device.h"
#include "core/dtype.h"

namespace zdl {

class Tensor;

struct DeferredSlot;  // the runtime's page-locked bytes

class DeferredRead {
 public:
  static constexpr size_t kMaxBytes = 32;

  DeferredRead() = default;
  // Queues the copy of `bytes` (at most kMaxBytes) at `src` on `device`.
  DeferredRead(const void* src, Device device, size_t bytes);
  // The bytes; waits for the compute stream only if this thread has not waited since the copy
  // was queued. Read them on the thread that queued the copy.
  const void* bytes() const;
  bool defined() const { return slot_ != nullptr; }

 private:
  std::shared_ptr<DeferredSlot> slot_;
};

// The value of a one-element tensor, read later: item() without its wait.
class DeferredScalar {
 public:
  DeferredScalar() = default;
  explicit DeferredScalar(const Tensor& scalar);
  double value() const;

 private:
  DeferredRead read_;
  DType dtype_ = DType::F32;
  double host_value_ = 0.0;  // a CPU scalar's value, read at once
};

// Judges bytes read later: the message of the failure, empty when the check passed.
using DeferredVerdict = std::function<std::string(const void* bytes)>;

// Queues a check of `bytes` at `src` on `device` (a CPU source is judged at once and throws
// there). Its verdict runs after this thread's next wait for its compute stream.
void defer_check(const void* src, Device device, size_t bytes, DeferredVerdict verdict);

// Waits for this thread's compute stream if checks are queued, judges them and throws the
// first failure (zdl::Error).
void verify_deferred_checks();

// Host waits for the GPU so far in this process (stream and event synchronizations zerodl
// makes); tests count them per training step. 0 in a CPU-only build.
int64_t cuda_host_waits();

}  // namespace zdl

// Memory accounting: every allocation carries a category (docs/design.md, mechanism 2).
//
// The ledger keeps current and peak bytes per category for each device, plus the peak of
// the total. A cap (bytes, per device) turns an over-budget allocation into an
// OutOfMemoryError that names the category and the sizes, instead of a crash later.
// Bytes counted are the bytes requested (not the allocator's alignment rounding), so a
// test can check the ledger exactly against the tensors it made.
//
//   { zdl::MemoryScope scope(zdl::MemoryCategory::Parameter); auto w = Tensor::empty({C, C}); }
//   zdl::memory_ledger().stats(Device::cpu()).current[Parameter]
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include "core/device.h"

namespace zdl {

// Model states come in full and shard flavours so a ZeRO run can show both: under ZeRO-3 the
// persistent parameter bytes are ParameterShard and the gathered units are Parameter.
enum class MemoryCategory : uint8_t {
  Parameter,       // full (gathered or unsharded) parameters
  ParameterShard,  // this rank's slice of sharded parameters
  Gradient,        // full gradients
  GradientShard,   // this rank's slice of reduced gradients
  OptimizerState,  // optimizer moments and f32 master weights of a mixed-precision run
  Activation,
  CommBuffer,
  Workspace,
};
constexpr int kNumMemoryCategories = 8;

const char* category_name(MemoryCategory c);

struct MemoryStats {
  std::array<int64_t, kNumMemoryCategories> current{};
  std::array<int64_t, kNumMemoryCategories> peak{};
  int64_t total_current = 0;
  int64_t total_peak = 0;
  int64_t num_allocs = 0;

  int64_t current_of(MemoryCategory c) const { return current[static_cast<int>(c)]; }
  int64_t peak_of(MemoryCategory c) const { return peak[static_cast<int>(c)]; }
};

// Process-wide ledger (one per rank, since ranks are processes). Thread-safe.
class MemoryLedger {
 public:
  // Records an allocation of `bytes` on `device` under `cat`; throws OutOfMemoryError
  // (and records nothing) when a cap is set and would be exceeded.
  void on_alloc(Device device, MemoryCategory cat, int64_t bytes);
  void on_free(Device device, MemoryCategory cat, int64_t bytes);

  MemoryStats stats(Device device) const;
  // Resets peaks to the current values (e.g. at the start of a measured step).
  void reset_peaks(Device device);
  void reset_peaks_all();

  // The offload place (ZeRO-Infinity's NVMe tier): bytes of each category this rank keeps in its
  // scratch file (dist/offload/nvme_store.h), counted when their region is reserved and freed
  // with the store. Separate from every device: a cap never counts them.
  void on_offload(MemoryCategory cat, int64_t bytes);
  void on_offload_free(MemoryCategory cat, int64_t bytes);
  MemoryStats offloaded() const;

  // Cap on the total bytes of a device kind (0 = no cap).
  void set_cap(DeviceType type, int64_t bytes);
  int64_t cap(DeviceType type) const;

 private:
  static int slot(Device d) { return d.is_cpu() ? 0 : 1 + (d.index & 15); }
  mutable std::mutex mu_;
  std::array<MemoryStats, 17> stats_{};
  MemoryStats offloaded_{};
  std::array<int64_t, 2> caps_{};
};

MemoryLedger& memory_ledger();

// The category new allocations on this thread get (default: Activation).
MemoryCategory current_memory_category();

// Sets the category for allocations on this thread while alive; scopes nest.
class MemoryScope {
 public:
  explicit MemoryScope(MemoryCategory c);
  ~MemoryScope();
  MemoryScope(const MemoryScope&) = delete;
  MemoryScope& operator=(const MemoryScope&) = delete;

 private:
  MemoryCategory prev_;
};

// Formats bytes as "12.3 MiB".
std::string format_bytes(int64_t bytes);

// The most resident memory this process has held since it started (getrusage's ru_maxrss), in
// bytes: what the ledger cannot see (code, libraries, allocator slack) included. 0 where the
// system does not say.
int64_t process_peak_rss_bytes();

}  // namespace zdl

#include "core/memory.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>

#include "core/check.h"

namespace zdl {

const char* category_name(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::Parameter: return "param";
    case MemoryCategory::ParameterShard: return "param_shard";
    case MemoryCategory::Gradient: return "grad";
    case MemoryCategory::GradientShard: return "grad_shard";
    case MemoryCategory::OptimizerState: return "optim";
    case MemoryCategory::Activation: return "activation";
    case MemoryCategory::CommBuffer: return "comm";
    case MemoryCategory::Workspace: return "workspace";
  }
  return "?";
}

std::string format_bytes(int64_t b) {
  char buf[64];
  double v = static_cast<double>(b);
  if (b < 1024) std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(b));
  else if (v < 1024.0 * 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", v / 1024);
  else if (v < 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.1f MiB", v / (1024.0 * 1024));
  else std::snprintf(buf, sizeof buf, "%.2f GiB", v / (1024.0 * 1024 * 1024));
  return buf;
}

int64_t process_peak_rss_bytes() {
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
#ifdef __APPLE__
  return static_cast<int64_t>(u.ru_maxrss);  // bytes there
#else
  return static_cast<int64_t>(u.ru_maxrss) * 1024;  // KiB on Linux
#endif
}

void MemoryLedger::on_alloc(Device device, MemoryCategory cat, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  MemoryStats& s = stats_[slot(device)];
  int64_t cap = caps_[device.is_cpu() ? 0 : 1];
  if (cap > 0 && s.total_current + bytes > cap) {
    std::string by_cat;
    for (int i = 0; i < kNumMemoryCategories; ++i)
      by_cat += detail::str(i ? ", " : "", category_name(static_cast<MemoryCategory>(i)), "=", format_bytes(s.current[i]));
    throw OutOfMemoryError(detail::str("out of memory on ", device.str(), ": allocating ", format_bytes(bytes),
                                       " of category '", category_name(cat), "' would bring the total to ",
                                       format_bytes(s.total_current + bytes), ", over the cap of ", format_bytes(cap),
                                       " (in use: ", by_cat, ")"));
  }
  int i = static_cast<int>(cat);
  s.current[i] += bytes;
  if (s.current[i] > s.peak[i]) s.peak[i] = s.current[i];
  s.total_current += bytes;
  if (s.total_current > s.total_peak) s.total_peak = s.total_current;
  ++s.num_allocs;
}

void MemoryLedger::on_free(Device device, MemoryCategory cat, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  MemoryStats& s = stats_[slot(device)];
  s.current[static_cast<int>(cat)] -= bytes;
  s.total_current -= bytes;
}

void MemoryLedger::on_offload(MemoryCategory cat, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  MemoryStats& s = offloaded_;
  const int i = static_cast<int>(cat);
  s.current[i] += bytes;
  s.peak[i] = std::max(s.peak[i], s.current[i]);
  s.total_current += bytes;
  s.total_peak = std::max(s.total_peak, s.total_current);
  ++s.num_allocs;
}

void MemoryLedger::on_offload_free(MemoryCategory cat, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  offloaded_.current[static_cast<int>(cat)] -= bytes;
  offloaded_.total_current -= bytes;
}

MemoryStats MemoryLedger::offloaded() const {
  std::lock_guard<std::mutex> lock(mu_);
  return offloaded_;
}

MemoryStats MemoryLedger::stats(Device device) const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_[slot(device)];
}

void MemoryLedger::reset_peaks(Device device) {
  std::lock_guard<std::mutex> lock(mu_);
  MemoryStats& s = stats_[slot(device)];
  s.peak = s.current;
  s.total_peak = s.total_current;
}

void MemoryLedger::reset_peaks_all() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& s : stats_) {
    s.peak = s.current;
    s.total_peak = s.total_current;
  }
}

void MemoryLedger::set_cap(DeviceType type, int64_t bytes) {
  ZDL_CHECK(bytes >= 0, "memory cap must be >= 0, got ", bytes);
  std::lock_guard<std::mutex> lock(mu_);
  caps_[type == DeviceType::CPU ? 0 : 1] = bytes;
}

int64_t MemoryLedger::cap(DeviceType type) const {
  std::lock_guard<std::mutex> lock(mu_);
  return caps_[type == DeviceType::CPU ? 0 : 1];
}

MemoryLedger& memory_ledger() {
  static MemoryLedger ledger;
  return ledger;
}

namespace {
thread_local MemoryCategory t_category = MemoryCategory::Activation;
}

MemoryCategory current_memory_category() { return t_category; }
MemoryScope::MemoryScope(MemoryCategory c) : prev_(t_category) { t_category = c; }
MemoryScope::~MemoryScope() { t_category = prev_; }

}  // namespace zdl

// The bandwidth an offload directory gives this rank, measured through the same store and I/O
// path as the offloaded states (docs/offload.md, "What it costs"): the bound a step's disk traffic
// sets, next to which offload_bench and the walkthrough put the measured step.
#pragma once
#include <cstdint>
#include <string>

namespace zdl::dist {

struct DiskBandwidth {
  double write_gbs = 0, read_gbs = 0;  // GB/s (1e9 bytes)
  // Seconds to write `written` and read `read` bytes at these rates, one after the other.
  double seconds(int64_t read, int64_t written) const;
};

// Rewrites, then reads, `bytes` (rounded up to 64 MiB pieces) through an NvmeStore in `dir` with
// its two I/O threads, from page-aligned memory as the states are; `direct` as
// OffloadOptions::direct_io. The first write of each region only allocates it and is not timed.
// Every rank that calls it at once shares the disk, as the ranks of a run do.
DiskBandwidth measure_disk_bandwidth(const std::string& dir, const std::string& prefix, int64_t bytes, bool direct);

}  // namespace zdl::dist

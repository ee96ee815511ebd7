// Snapshots of the ledgers for metrics files (train_gpt --metrics writes one per step): this
// rank's memory by category and the bytes each collective moved, as JSON objects.
#pragma once
#include <nlohmann/json.hpp>

#include "core/device.h"

namespace zdl::dist {

// Bytes on `dev` now, by category ("param" = full + shard, "param_full", "param_shard", "grad",
// "grad_full", "grad_shard", "optim", "activation", "comm", "workspace"), the total peak since
// the last reset_peaks ("peak"), the process's peak resident memory since it started
// ("process_peak_rss": libraries and allocator slack included), the device, and on a GPU the pinned host buffers of MPI
// staging ("host_comm").
nlohmann::json memory_snapshot(Device dev);

// {"<collective>/<phase>": {"calls", "payload", "wire", "inter_node"}} for every pair the comm ledger counted
// since its last reset.
nlohmann::json comm_snapshot();

}  // namespace zdl::dist

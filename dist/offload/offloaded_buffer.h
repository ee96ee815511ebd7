// OffloadedBuffer: one model-state buffer whose home is the rank's NVMe scratch file, brought
// into memory only while it is used (docs/offload.md); Resident: the scope that brings a few in.
//
// A buffer keeps its Storage (and so every tensor view of it: the optimizer's moments, a unit's
// master or parameter shard) and moves its bytes: evicted, the Storage is released (its bytes
// freed, a use is the released-storage error naming it) and the bytes live in the store's
// region; fetched, the Storage is materialized and the region read back into it. The bytes are
// copied, never converted, so a state that travels is bit for bit the state that stayed.
//
//   states       Resident --evict--> Evicting (dirty: write queued) --settle--> Evicted
//                Resident --evict--> Evicted  (clean: the region already holds the bytes)
//                Evicted --fetch_async--> Fetching --wait--> Resident
//                Evicting --fetch_async--> Resident (the write finishes; the bytes stay)
//
//   { dist::Resident r({&master}, {&exp_avg, &exp_avg_sq}); r.wait(); update(...); }  // evicted again
#pragma once
#include <future>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "dist/offload/nvme_store.h"

namespace zdl::dist {

class OffloadedBuffer {
 public:
  // Takes the storage behind `t` (a CPU tensor that spans all of it), reserves its region in
  // `store`, writes its bytes there and releases them. The region counts in the ledger's
  // offload place (MemoryLedger::offloaded) under the storage's category.
  OffloadedBuffer(NvmeStore& store, const Tensor& t);
  ~OffloadedBuffer();  // waits for its I/O in flight
  OffloadedBuffer(const OffloadedBuffer&) = delete;
  OffloadedBuffer& operator=(const OffloadedBuffer&) = delete;

  bool resident() const { return state_ == State::Resident; }
  // Evicted -> Fetching: allocates the bytes (under the memory cap) and queues the read.
  // Evicting -> Resident. A no-op otherwise.
  void fetch_async();
  // Evicted -> Resident without reading: the caller overwrites every byte (marked changed).
  void fetch_for_overwrite();
  // Fetching -> Resident: waits for the read (throws its I/O error).
  void wait();
  // The bytes were changed in memory: the next evict writes them.
  void mark_dirty() { dirty_ = true; }
  // Resident -> Evicting (changed: the write is queued) or Evicted (unchanged: released now).
  // Fetching waits for the read first. A no-op when not resident.
  void evict();
  // Evicting -> Evicted: waits for the write (throws its I/O error), then releases the bytes.
  void settle();

  int64_t bytes() const { return bytes_; }

  const std::string& label() const { return storage_->label(); }

 private:
  enum class State { Resident, Fetching, Evicting, Evicted };
  NvmeStore& store_;
  Storage storage_;
  int64_t bytes_ = 0;
  int64_t region_ = 0;
  State state_ = State::Resident;
  bool dirty_ = true;  // the region holds nothing yet
  std::shared_future<void> io_;
};

// Settles every buffer of a unit (null pointers skipped): what a caller that evicted them does one
// unit later, so their writes overlap the next unit's work.
void settle(const std::vector<OffloadedBuffer*>& buffers);

// Brings buffers in for a scope: `reads` are used as they are, `writes` are changed, and
// `overwrites` are written whole (brought in without being read). The fetches
// are queued at construction (so a scope made one unit ahead overlaps the disk with compute);
// wait() makes them present. At the end, the buffers this scope brought in are evicted again
// (changed ones written back, asynchronously: settle them, or fetch them again, to finish);
// buffers already resident stay so (changed ones marked to be written when evicted).
// Null pointers are skipped.
class Resident {
 public:
  Resident(std::vector<OffloadedBuffer*> reads, std::vector<OffloadedBuffer*> writes = {},
           std::vector<OffloadedBuffer*> overwrites = {});
  ~Resident();
  Resident(const Resident&) = delete;
  Resident& operator=(const Resident&) = delete;
  void wait();

 private:
  struct Entry {
    OffloadedBuffer* buffer;
    bool fetched;  // this scope brought it in
  };
  std::vector<Entry> entries_;
};

}  // namespace zdl::dist

#include "dist/offload/offloaded_buffer.h"

#include <iostream>
#include <utility>

#include "core/check.h"

namespace zdl::dist {

OffloadedBuffer::OffloadedBuffer(NvmeStore& store, const Tensor& t) : store_(store), storage_(t.storage()) {
  ZDL_CHECK(t.device().is_cpu(), store.prefix(), " offload: '", storage_->label(), "' is on ", t.device().str(),
            "; NVMe offload moves CPU buffers only");
  ZDL_CHECK(t.offset() == 0 && t.is_contiguous() &&
                static_cast<size_t>(t.numel()) * element_size(t.dtype()) == storage_->nbytes(),
            store.prefix(), " offload: '", storage_->label(), "' is a view of part of its storage");
  bytes_ = static_cast<int64_t>(storage_->nbytes());
  const std::string what = storage_->label().empty() ? std::string("a buffer") : "'" + storage_->label() + "'";
  region_ = store_.reserve(bytes_, what);
  memory_ledger().on_offload(storage_->category(), bytes_);
  evict();
  settle();
}

OffloadedBuffer::~OffloadedBuffer() {
  if (io_.valid()) {
    try {
      io_.get();
    } catch (...) {  // the run is already failing; the buffer goes with it
    }
  }
  memory_ledger().on_offload_free(storage_->category(), bytes_);
}

void OffloadedBuffer::fetch_async() {
  if (state_ == State::Evicting) {
    io_.get();
    io_ = {};
    state_ = State::Resident;
    return;
  }
  if (state_ != State::Evicted) return;
  storage_->materialize(storage_->category());
  io_ = store_.read_async(region_, storage_->data(), bytes_);
  state_ = State::Fetching;
  dirty_ = false;
}

void OffloadedBuffer::fetch_for_overwrite() {
  if (state_ == State::Evicted) {
    storage_->materialize(storage_->category());
    state_ = State::Resident;
  } else {
    fetch_async();
    wait();
  }
  dirty_ = true;
}

void OffloadedBuffer::wait() {
  if (state_ != State::Fetching) return;
  std::shared_future<void> f = std::exchange(io_, {});
  state_ = State::Resident;  // the bytes are allocated either way; a failed read leaves them unread
  f.get();
}

void OffloadedBuffer::evict() {
  wait();
  if (state_ != State::Resident) return;
  if (dirty_) {
    io_ = store_.write_async(region_, storage_->data(), bytes_);
    dirty_ = false;
    state_ = State::Evicting;
  } else {
    storage_->release();
    state_ = State::Evicted;
  }
}

void OffloadedBuffer::settle() {
  if (state_ != State::Evicting) return;
  std::shared_future<void> f = std::exchange(io_, {});
  try {
    f.get();
  } catch (...) {
    state_ = State::Resident;  // the bytes were not saved: keep them, and write them next time
    dirty_ = true;
    throw;
  }
  storage_->release();
  state_ = State::Evicted;
}

void settle(const std::vector<OffloadedBuffer*>& buffers) {
  for (OffloadedBuffer* b : buffers)
    if (b) b->settle();
}

Resident::Resident(std::vector<OffloadedBuffer*> reads, std::vector<OffloadedBuffer*> writes,
                   std::vector<OffloadedBuffer*> overwrites) {
  auto add = [&](OffloadedBuffer* b, bool write) {
    if (!b) return;
    entries_.push_back({b, !b->resident()});
    b->fetch_async();
    if (write) b->mark_dirty();  // after the fetch, which starts clean
  };
  for (OffloadedBuffer* b : reads) add(b, false);
  for (OffloadedBuffer* b : writes) add(b, true);
  for (OffloadedBuffer* b : overwrites) {
    if (!b) continue;
    entries_.push_back({b, !b->resident()});
    b->fetch_for_overwrite();
  }
}

void Resident::wait() {
  for (Entry& e : entries_) e.buffer->wait();
}

Resident::~Resident() {
  for (Entry& e : entries_) {
    if (!e.fetched) continue;
    try {
      e.buffer->evict();
    } catch (const std::exception& ex) {  // a read that failed: the scope's owner saw it in wait()
      std::cerr << "offload: evicting '" << e.buffer->label() << "': " << ex.what() << "\n";
    }
  }
}

}  // namespace zdl::dist

// A Storage owns the bytes behind one or more tensor views (docs/design.md, mechanism 1).
//
// It can be *released* (bytes freed, identity and size kept) and *materialized* again.
// ZeRO-3 depends on this: tensors saved for backward keep pointing at the same Storage,
// which is empty between forward and backward and holds the re-gathered parameter when
// backward runs. Every op reads data() at execution time, so touching a released storage
// is a hard error naming the storage's label (the parameter name, when it is one).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/device.h"
#include "core/memory.h"

namespace zdl {

class StorageImpl {
 public:
  // Allocates `nbytes` on `device`, accounted under `category`.
  StorageImpl(size_t nbytes, Device device, MemoryCategory category);
  // A storage of `nbytes` that starts released (no bytes yet): placed first, materialized later.
  static std::shared_ptr<StorageImpl> make_released(size_t nbytes, Device device, MemoryCategory category);
  ~StorageImpl();
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;

  // The bytes; throws if the storage is released.
  void* data() const;

  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  MemoryCategory category() const { return category_; }
  bool is_released() const { return released_; }

  // Frees the bytes; the storage keeps its size and identity. Idempotent.
  void release();
  // Allocates the bytes again (contents undefined) under `category`; no-op if present.
  void materialize(MemoryCategory category);
  // Moves the accounting of the bytes to another category (e.g. a fresh tensor becoming a gradient).
  void set_category(MemoryCategory category);

  // A name for error messages, e.g. "h.3.attn.c_attn.weight".
  void set_label(std::string label) { label_ = std::move(label); }
  const std::string& label() const { return label_; }
  const std::string& release_hint() const { return release_hint_; }
  // Extra advice appended to the released-storage error (the ZeRO manager sets it).
  void set_release_hint(std::string hint) { release_hint_ = std::move(hint); }

  // [Note: version counter] Counts the in-place writes through Tensor (copy_, fill_, zero_,
  // add_, scale_) to any view of these bytes, so autograd can tell that a tensor it saved for
  // backward was changed after the forward (autograd/node.h). Kernels writing through raw
  // pointers do not count. set_version() puts back a count whose writes did not change the
  // values (ZeRO-3's re-gather of the same parameters).
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }
  void set_version(uint64_t v) { version_.store(v, std::memory_order_relaxed); }

 private:
  struct ReleasedTag {};
  StorageImpl(ReleasedTag, size_t nbytes, Device device, MemoryCategory category)
      : nbytes_(nbytes), device_(device), category_(category), released_(true) {}
  size_t nbytes_;
  Device device_;
  MemoryCategory category_;
  void* ptr_ = nullptr;
  bool released_ = false;
  std::string label_;
  std::string release_hint_;
  std::atomic<uint64_t> version_{0};
};

using Storage = std::shared_ptr<StorageImpl>;

}  // namespace zdl

#include "core/storage.h"

#include "core/allocator.h"
#include "core/check.h"

namespace zdl {

StorageImpl::StorageImpl(size_t nbytes, Device device, MemoryCategory category)
    : nbytes_(nbytes), device_(device), category_(category) {
  memory_ledger().on_alloc(device_, category_, static_cast<int64_t>(nbytes_));
  try {
    ptr_ = allocator_for(device_).allocate(nbytes_);
  } catch (...) {
    memory_ledger().on_free(device_, category_, static_cast<int64_t>(nbytes_));
    throw;
  }
}

std::shared_ptr<StorageImpl> StorageImpl::make_released(size_t nbytes, Device device, MemoryCategory category) {
  return std::shared_ptr<StorageImpl>(new StorageImpl(ReleasedTag{}, nbytes, device, category));
}

StorageImpl::~StorageImpl() { release(); }

void* StorageImpl::data() const {
  if (released_) {
    throw Error(detail::str("storage", label_.empty() ? "" : " of '" + label_ + "'", " (", nbytes_,
                            " bytes) is released: its bytes were freed",
                            release_hint_.empty() ? "" : "; " + release_hint_));
  }
  return ptr_;
}

void StorageImpl::release() {
  if (released_) return;
  if (ptr_) allocator_for(device_).deallocate(ptr_, nbytes_);
  memory_ledger().on_free(device_, category_, static_cast<int64_t>(nbytes_));
  ptr_ = nullptr;
  released_ = true;
}

void StorageImpl::materialize(MemoryCategory category) {
  if (!released_) return;
  memory_ledger().on_alloc(device_, category, static_cast<int64_t>(nbytes_));
  try {
    ptr_ = allocator_for(device_).allocate(nbytes_);
  } catch (...) {
    memory_ledger().on_free(device_, category, static_cast<int64_t>(nbytes_));
    throw;
  }
  category_ = category;
  released_ = false;
}

void StorageImpl::set_category(MemoryCategory category) {
  if (category == category_) return;
  if (!released_) {
    memory_ledger().on_free(device_, category_, static_cast<int64_t>(nbytes_));
    memory_ledger().on_alloc(device_, category, static_cast<int64_t>(nbytes_));
  }
  category_ = category;
}

}  // namespace zdl

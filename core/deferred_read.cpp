// DeferredScalar: a one-element tensor's value read later (core/deferred_read.h); the bytes
// come through the runtime's DeferredRead.
#include "core/deferred_read.h"

#include <cstring>

#include "core/tensor.h"

namespace zdl {

DeferredScalar::DeferredScalar(const Tensor& scalar) {
  ZDL_CHECK(scalar.defined() && scalar.numel() == 1, "DeferredScalar needs a one-element tensor, got shape=",
            scalar.defined() ? shape_str(scalar.shape()) : std::string("(undefined)"));
  if (scalar.device().is_cpu()) {
    host_value_ = scalar.item();
    return;
  }
  dtype_ = scalar.dtype();
  read_ = DeferredRead(scalar.raw_data(), scalar.device(), element_size(scalar.dtype()));
}

double DeferredScalar::value() const {
  if (!read_.defined()) return host_value_;
  const void* p = read_.bytes();
  auto load = [p](auto v) {
    std::memcpy(&v, p, sizeof(v));
    return v;
  };
  switch (dtype_) {
    case DType::F32: return load(float{});
    case DType::F64: return load(double{});
    case DType::BF16: return static_cast<float>(load(BFloat16{}));
    case DType::F16: return static_cast<float>(load(Half{}));
    case DType::I32: return static_cast<double>(load(int32_t{}));
    case DType::I64: return static_cast<double>(load(int64_t{}));
  }
  return 0.0;
}

}  // namespace zdl

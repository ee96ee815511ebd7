// Element types. f32 is the compute default; f64 exists for gradient checks on the CPU;
// bf16 is the mixed-precision compute/communication type; i32/i64 hold token ids and targets.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

#include "core/check.h"

namespace zdl {

enum class DType : uint8_t { F32, F64, BF16, F16, I32, I64 };

// bfloat16 as raw bits; conversion rounds to nearest even (NaN stays NaN).
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep it quiet NaN
      bits = static_cast<uint16_t>((u >> 16) | 0x40);
    } else {
      uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
      bits = static_cast<uint16_t>((u + rounding) >> 16);
    }
  }
  operator float() const {
    uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

// IEEE half as raw bits (storage and conversion only; no f16 compute kernels on the CPU).
struct Half {
  uint16_t bits = 0;
  Half() = default;
  explicit Half(float f);
  operator float() const;
};

inline size_t element_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::BF16: return 2;
    case DType::F16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
  }
  return "?";
}

inline bool is_floating(DType t) { return t == DType::F32 || t == DType::F64 || t == DType::BF16 || t == DType::F16; }

inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

// Parses "f32", "bf16", ... (for command lines and checkpoint headers).
DType dtype_from_name(const std::string& name);

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::F32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::F64; };
template <> struct dtype_of<BFloat16> { static constexpr DType value = DType::BF16; };
template <> struct dtype_of<Half> { static constexpr DType value = DType::F16; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::I32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::I64; };

// Calls f with a value of the C++ type of a floating dtype computed on the CPU (f32, f64).
// Usage: ZDL_DISPATCH_FLOAT(x.dtype(), "gelu", [&](auto tag) { using T = decltype(tag); ... });
#define ZDL_DISPATCH_FLOAT(dtype, opname, ...)                                                   \
  [&] {                                                                                          \
    auto zdl_f_ = __VA_ARGS__;                                                                   \
    switch (dtype) {                                                                             \
      case ::zdl::DType::F32: return zdl_f_(float{});                                            \
      case ::zdl::DType::F64: return zdl_f_(double{});                                           \
      default: break;                                                                            \
    }                                                                                            \
    ZDL_CHECK(false, opname, ": dtype ", ::zdl::dtype_name(dtype), " not supported (use f32 or f64)"); \
    return zdl_f_(float{});                                                                      \
  }()

// ZDL_DISPATCH_FLOAT, plus bf16 (T = BFloat16): for the CPU kernels that take bf16 buffers
// and compute in f32 (kernels/cpu/compute_type.h).
#define ZDL_DISPATCH_FLOAT_OR_BF16(dtype, opname, ...)                                           \
  [&] {                                                                                          \
    auto zdl_f_ = __VA_ARGS__;                                                                   \
    switch (dtype) {                                                                             \
      case ::zdl::DType::F32: return zdl_f_(float{});                                            \
      case ::zdl::DType::F64: return zdl_f_(double{});                                           \
      case ::zdl::DType::BF16: return zdl_f_(::zdl::BFloat16{});                                 \
      default: break;                                                                            \
    }                                                                                            \
    ZDL_CHECK(false, opname, ": dtype ", ::zdl::dtype_name(dtype), " not supported (use f32, f64 or bf16)"); \
    return zdl_f_(float{});                                                                      \
  }()

}  // namespace zdl

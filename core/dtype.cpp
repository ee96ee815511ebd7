#include "core/dtype.h"

namespace zdl {

DType dtype_from_name(const std::string& n) {
  if (n == "f32" || n == "float32" || n == "F32") return DType::F32;
  if (n == "f64" || n == "float64" || n == "F64") return DType::F64;
  if (n == "bf16" || n == "bfloat16" || n == "BF16") return DType::BF16;
  if (n == "f16" || n == "float16" || n == "F16") return DType::F16;
  if (n == "i32" || n == "int32" || n == "I32") return DType::I32;
  if (n == "i64" || n == "int64" || n == "I64") return DType::I64;
  ZDL_CHECK(false, "unknown dtype '", n, "' (expected f32, f64, bf16, f16, i32 or i64)");
  return DType::F32;
}

// Half conversion: plain bit manipulation (round to nearest even), subnormals included.
Half::Half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mant = x & 0x007fffffu;
  int32_t exp = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  if (((x >> 23) & 0xff) == 0xff) {  // inf / nan
    bits = static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0u));
    return;
  }
  if (exp >= 0x1f) { bits = static_cast<uint16_t>(sign | 0x7c00u); return; }
  if (exp <= 0) {
    if (exp < -10) { bits = static_cast<uint16_t>(sign); return; }
    mant |= 0x00800000u;
    uint32_t shift = static_cast<uint32_t>(14 - exp);
    uint32_t half_mant = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_mant & 1))) ++half_mant;
    bits = static_cast<uint16_t>(sign | half_mant);
    return;
  }
  uint32_t h = sign | (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;
  bits = static_cast<uint16_t>(h);
}

Half::operator float() const {
  uint32_t sign = (static_cast<uint32_t>(bits) & 0x8000u) << 16;
  uint32_t exp = (bits >> 10) & 0x1f;
  uint32_t mant = bits & 0x3ffu;
  uint32_t out;
  if (exp == 0) {
    if (mant == 0) {
      out = sign;
    } else {  // subnormal: normalize
      int e = -1;
      do { ++e; mant <<= 1; } while (!(mant & 0x400u));
      out = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    out = sign | 0x7f800000u | (mant << 13);
  } else {
    out = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &out, 4);
  return f;
}

}  // namespace zdl

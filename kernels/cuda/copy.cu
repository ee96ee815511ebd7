// Layout copies and fills on one CUDA device (see copy.h). The CPU twin is cpu_copy / fill_ in
// core/tensor.cpp; conversions here reproduce its bits: f32 -> bf16 and f32 -> f16 use the same
// round-to-nearest-even bit manipulation as core/dtype.h / dtype.cpp (NaN payloads included),
// and every other pair goes through double as the CPU's load_as_double / store_as do.
#include <cuda_fp16.h>

#include <cstring>

#include "kernels/cuda/copy.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/strided.cuh"

namespace zdl::kernels::cuda {

namespace {

// ---- element conversions, bit-identical to core/dtype.h / dtype.cpp ----

__device__ __forceinline__ uint16_t half_bits_from_float(float f) {
  const uint32_t x = __float_as_uint(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mant = x & 0x007fffffu;
  const int32_t exp = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  if (((x >> 23) & 0xff) == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0u));
  if (exp >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00u);
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    mant |= 0x00800000u;
    const uint32_t shift = static_cast<uint32_t>(14 - exp);
    uint32_t half_mant = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_mant & 1))) ++half_mant;
    return static_cast<uint16_t>(sign | half_mant);
  }
  uint32_t h = sign | (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;
  return static_cast<uint16_t>(h);
}
__device__ __forceinline__ float float_from_half_bits(uint16_t b) {
  return __half2float(__ushort_as_half(b));  // exact (every half is a float)
}

template <class I>
__device__ __forceinline__ double load_as_double(const void* base, DType t, I i) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(base)[i];
    case DType::F64: return static_cast<const double*>(base)[i];
    case DType::BF16: return float_from_bf16_bits(static_cast<const uint16_t*>(base)[i]);
    case DType::F16: return float_from_half_bits(static_cast<const uint16_t*>(base)[i]);
    case DType::I32: return static_cast<const int32_t*>(base)[i];
    case DType::I64: return static_cast<double>(static_cast<const int64_t*>(base)[i]);
  }
  return 0.0;
}

template <class I>
__device__ __forceinline__ void store_from_double(void* base, DType t, I i, double v) {
  switch (t) {
    case DType::F32: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case DType::F64: static_cast<double*>(base)[i] = v; break;
    case DType::BF16: static_cast<uint16_t*>(base)[i] = bf16_bits_from_float(static_cast<float>(v)); break;
    case DType::F16: static_cast<uint16_t*>(base)[i] = half_bits_from_float(static_cast<float>(v)); break;
    case DType::I32: static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v); break;
    case DType::I64: static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v); break;
  }
}

// ---- functors for launch_strided ----

template <class W>
struct CopyWords {  // same dtype: move the element's bits
  W* dst;
  const W* src;
  template <class I>
  __device__ void operator()(const I (&o)[2]) const { dst[o[0]] = src[o[1]]; }
};

struct F32ToBf16 {
  uint16_t* dst;
  const float* src;
  template <class I>
  __device__ void operator()(const I (&o)[2]) const { dst[o[0]] = bf16_bits_from_float(src[o[1]]); }
};

struct Bf16ToF32 {
  float* dst;
  const uint16_t* src;
  template <class I>
  __device__ void operator()(const I (&o)[2]) const { dst[o[0]] = float_from_bf16_bits(src[o[1]]); }
};

struct ConvertViaDouble {  // any other pair, as the CPU's generic path
  void* dst;
  const void* src;
  DType dst_dtype, src_dtype;
  template <class I>
  __device__ void operator()(const I (&o)[2]) const {
    store_from_double(dst, dst_dtype, o[0], load_as_double(src, src_dtype, o[1]));
  }
};

template <class W>
struct FillWords {
  W* dst;
  W value;
  template <class I>
  __device__ void operator()(const I (&o)[1]) const { dst[o[0]] = value; }
};

template <class W>
void copy_words(const StridedRows<2>& it, void* dst, const void* src) {
  launch_strided(it, CopyWords<W>{static_cast<W*>(dst), static_cast<const W*>(src)}, "cuda strided_copy");
}

template <class W>
void fill_words(const StridedRows<1>& it, void* dst, W value) {
  launch_strided(it, FillWords<W>{static_cast<W*>(dst), value}, "cuda strided_fill");
}

}  // namespace

void strided_copy(const StridedRows<2>& it, DType dst_dtype, void* dst, DType src_dtype, const void* src) {
  const int64_t n = strided_numel(it);
  if (n == 0) return;
  if (dst_dtype == src_dtype) {
    const size_t es = element_size(dst_dtype);
    if (strided_all_contiguous(it)) {
      ZDL_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * es, cudaMemcpyDeviceToDevice, compute_stream()));
      return;
    }
    switch (es) {
      case 2: return copy_words<uint16_t>(it, dst, src);
      case 4: return copy_words<uint32_t>(it, dst, src);
      case 8: return copy_words<uint64_t>(it, dst, src);
    }
    ZDL_CHECK(false, "cuda strided_copy: unexpected element size ", es, " of ", dtype_name(dst_dtype));
  }
  const bool bf16_f32 = (dst_dtype == DType::BF16 && src_dtype == DType::F32) ||
                        (dst_dtype == DType::F32 && src_dtype == DType::BF16);
  if (bf16_f32 && strided_all_contiguous(it)) return cast(src_dtype, dst_dtype, n, src, dst);  // 16-byte packs
  if (dst_dtype == DType::BF16 && src_dtype == DType::F32)
    return launch_strided(it, F32ToBf16{static_cast<uint16_t*>(dst), static_cast<const float*>(src)},
                          "cuda strided_copy");
  if (dst_dtype == DType::F32 && src_dtype == DType::BF16)
    return launch_strided(it, Bf16ToF32{static_cast<float*>(dst), static_cast<const uint16_t*>(src)},
                          "cuda strided_copy");
  launch_strided(it, ConvertViaDouble{dst, src, dst_dtype, src_dtype}, "cuda strided_copy");
}

void strided_fill(const StridedRows<1>& it, DType dtype, void* dst, double value) {
  if (strided_numel(it) == 0) return;
  // The element's bits, converted on the host exactly as the CPU fill_ converts the value.
  uint64_t bits = 0;
  switch (dtype) {
    case DType::F32: { float v = static_cast<float>(value); std::memcpy(&bits, &v, 4); break; }
    case DType::F64: std::memcpy(&bits, &value, 8); break;
    case DType::BF16: bits = BFloat16(static_cast<float>(value)).bits; break;
    case DType::F16: bits = Half(static_cast<float>(value)).bits; break;
    case DType::I32: { int32_t v = static_cast<int32_t>(value); std::memcpy(&bits, &v, 4); break; }
    case DType::I64: { int64_t v = static_cast<int64_t>(value); std::memcpy(&bits, &v, 8); break; }
  }
  if (bits == 0 && strided_all_contiguous(it)) {  // zeros (every dtype's 0 is all-zero bits)
    ZDL_CUDA_CHECK(cudaMemsetAsync(dst, 0, static_cast<size_t>(strided_numel(it)) * element_size(dtype), compute_stream()));
    return;
  }
  switch (element_size(dtype)) {
    case 2: return fill_words<uint16_t>(it, dst, static_cast<uint16_t>(bits));
    case 4: return fill_words<uint32_t>(it, dst, static_cast<uint32_t>(bits));
    case 8: return fill_words<uint64_t>(it, dst, bits);
  }
  ZDL_CHECK(false, "cuda strided_fill: unexpected element size of ", dtype_name(dtype));
}

}  // namespace zdl::kernels::cuda

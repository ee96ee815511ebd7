#include "kernels/cpu/quantize.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "kernels/cpu/compute_type.h"
#include "kernels/cpu/parallel.h"

namespace zdl::kernels::cpu {

namespace {

template <class T>
void quantize(int64_t n, const T* x, int64_t block, int8_t* q, float* scales) {
  // Blocks are independent: any split over threads gives the same bytes.
  parallel_for(quantized_blocks(n, block), 2 * block, [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b) {
      const int64_t lo = b * block, hi = std::min(n, lo + block);
      float amax = 0.0f;
      for (int64_t i = lo; i < hi; ++i) amax = std::max(amax, std::fabs(static_cast<float>(x[i])));
      const float scale = amax / 127.0f;
      scales[b] = scale;
      for (int64_t i = lo; i < hi; ++i) {
        const float v = scale > 0.0f ? std::nearbyint(static_cast<float>(x[i]) / scale) : 0.0f;
        q[i] = static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f));
      }
    }
  });
}

template <class T>
void dequantize(int64_t n, const int8_t* q, const float* scales, int64_t block, T* x) {
  parallel_for(quantized_blocks(n, block), block, [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b) {
      const int64_t lo = b * block, hi = std::min(n, lo + block);
      for (int64_t i = lo; i < hi; ++i) x[i] = T(static_cast<float>(q[i]) * scales[b]);
    }
  });
}

}  // namespace

void quantize_int8(DType t, int64_t n, const void* x, int64_t block, int8_t* q, float* scales) {
  ZDL_CHECK(block > 0, "quantize_int8: block must be > 0, got ", block);
  if (t == DType::F32) quantize(n, static_cast<const float*>(x), block, q, scales);
  else if (t == DType::BF16) quantize(n, static_cast<const BFloat16*>(x), block, q, scales);
  else throw Error(detail::str("quantize_int8: dtype ", dtype_name(t), " (f32 or bf16)"));
}

void dequantize_int8(DType t, int64_t n, const int8_t* q, const float* scales, int64_t block, void* x) {
  ZDL_CHECK(block > 0, "dequantize_int8: block must be > 0, got ", block);
  if (t == DType::F32) dequantize(n, q, scales, block, static_cast<float*>(x));
  else if (t == DType::BF16) dequantize(n, q, scales, block, static_cast<BFloat16*>(x));
  else throw Error(detail::str("dequantize_int8: dtype ", dtype_name(t), " (f32 or bf16)"));
}

void quantize_record(DType t, int64_t n, const void* x, int32_t* record) {
  quantize_int8(t, n, x, kQuantBlock, reinterpret_cast<int8_t*>(record), reinterpret_cast<float*>(record + (n + 3) / 4));
}

void dequantize_record(DType t, int64_t n, const int32_t* record, void* x) {
  dequantize_int8(t, n, reinterpret_cast<const int8_t*>(record), reinterpret_cast<const float*>(record + (n + 3) / 4),
                  kQuantBlock, x);
}

}  // namespace zdl::kernels::cpu

// Block-wise symmetric int8 quantization: the weights ZeRO++'s qwZ gathers
// (ZeroOptions::quantize_weights, docs/multinode.md).
//
// n values in blocks of `block` (the last may be shorter). Block b's scale is max |x| / 127 over
// the block (0 for an all-zero block), and q = x / scale rounded to nearest even, in [-127, 127].
// Dequantizing gives q x scale, within scale / 2 = max |x| / 254 of x: each value's error is at
// most 1/254 of the largest magnitude in its block (plus the compute dtype's own rounding).
// Deterministic: the same input gives the same bytes on every rank and thread count.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace zdl::kernels::cpu {

inline constexpr int64_t kQuantBlock = 256;

inline int64_t quantized_blocks(int64_t n, int64_t block = kQuantBlock) { return (n + block - 1) / block; }

// x: n values (f32 or bf16, by `t`); q: n int8; scales: quantized_blocks(n, block) floats.
void quantize_int8(DType t, int64_t n, const void* x, int64_t block, int8_t* q, float* scales);
// The inverse: x[i] = q[i] x scales[i / block], rounded to `t`.
void dequantize_int8(DType t, int64_t n, const int8_t* q, const float* scales, int64_t block, void* x);

// A record: n values quantized in blocks of kQuantBlock and packed into int32 words, what one
// rank sends of them: the n codes (padded to whole words), then the blocks' float scales.
inline int64_t quantized_record_words(int64_t n) { return (n + 3) / 4 + quantized_blocks(n); }
void quantize_record(DType t, int64_t n, const void* x, int32_t* record);
void dequantize_record(DType t, int64_t n, const int32_t* record, void* x);

}  // namespace zdl::kernels::cpu

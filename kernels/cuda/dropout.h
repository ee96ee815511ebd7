// Inverted dropout on CUDA with the CPU twin's mask (kernels/cpu/dropout.h), bit for bit:
//   keep_i = Philox(seed, stream).uniform(offset + i) >= p,   out_i = keep_i ? x_i * (f32)(1 / (1 - p)) : 0
// The Philox block is the same __host__ __device__ function the CPU calls (core/rng.h), and
// the comparison is done exactly: uniform() is k * 2^-24 for the integer k = word >> 8, so
// `u >= p` (in double, as the CPU compares) is `k >= ceil(p * 2^24)`, computed once on the host.
// The scaling is one f32 multiply, as on the CPU (bf16: the CPU detours through f32 and rounds
// once; so does this kernel), so outputs match the CPU bit for bit too.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace zdl::kernels::cuda {

// out[i] = keep(offset + i) ? x[i] / (1 - p) : 0 for n contiguous elements (out may alias x).
// p in [0, 1). `offset` is the flat index of x[0] in the full tensor (0 for a whole tensor).
void dropout_forward(DType dtype, int64_t n, const void* x, double p, uint64_t seed, uint64_t stream, void* out,
                     int64_t offset = 0);

// dx[i] = keep(offset + i) ? dout[i] / (1 - p) : 0, the same mask as forward.
void dropout_backward(DType dtype, int64_t n, const void* dout, double p, uint64_t seed, uint64_t stream, void* dx,
                      int64_t offset = 0);

}  // namespace zdl::kernels::cuda

// Inverted dropout with a counter-based mask (core/rng.h):
//   keep_i = Philox(seed, stream).uniform(i) >= p,   out_i = keep_i ? x_i / (1 - p) : 0
// where i is the flat index in the contiguous buffer. The mask is a pure function of
// (seed, stream, i): backward regenerates it instead of saving it (no mask memory between
// forward and backward, ~10 Philox rounds per element of recompute), and any slice of a
// tensor can be masked alone given its flat offset, bit-identical to the whole.
// T: float, double, BFloat16 (scaled in f32, rounded once).
#pragma once
#include <cstdint>

namespace zdl::kernels::cpu {

// out[i] = keep(offset + i) ? x[i] / (1 - p) : 0 for n contiguous elements (out may alias x).
// `offset` is the flat index of x[0] in the full tensor (0 for a whole tensor).
template <class T>
void dropout_forward(int64_t n, const T* x, double p, uint64_t seed, uint64_t stream, T* out, int64_t offset = 0);

// dx[i] = keep(offset + i) ? dout[i] / (1 - p) : 0, the same mask as forward.
template <class T>
void dropout_backward(int64_t n, const T* dout, double p, uint64_t seed, uint64_t stream, T* dx, int64_t offset = 0);

}  // namespace zdl::kernels::cpu

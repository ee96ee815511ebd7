#include "kernels/cpu/dropout.h"

#include "core/rng.h"
#include "kernels/cpu/compute_type.h"
#include "kernels/cpu/parallel.h"

namespace zdl::kernels::cpu {

namespace {

// Forward and backward are the same masked scaling; kept as one loop so they cannot drift.
template <class T>
void apply_mask(int64_t n, const T* x, double p, uint64_t seed, uint64_t stream, T* out, int64_t offset) {
  using A = compute_t<T>;
  const Philox gen(seed, stream);
  const A scale = static_cast<A>(1.0 / (1.0 - p));
  parallel_for(n, 32, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      bool keep = static_cast<double>(gen.uniform(static_cast<uint64_t>(offset + i))) >= p;
      out[i] = keep ? static_cast<T>(static_cast<A>(x[i]) * scale) : T(0);
    }
  });
}

}  // namespace

template <class T>
void dropout_forward(int64_t n, const T* x, double p, uint64_t seed, uint64_t stream, T* out, int64_t offset) {
  apply_mask(n, x, p, seed, stream, out, offset);
}

template <class T>
void dropout_backward(int64_t n, const T* dout, double p, uint64_t seed, uint64_t stream, T* dx, int64_t offset) {
  apply_mask(n, dout, p, seed, stream, dx, offset);
}

template void dropout_forward<float>(int64_t, const float*, double, uint64_t, uint64_t, float*, int64_t);
template void dropout_forward<double>(int64_t, const double*, double, uint64_t, uint64_t, double*, int64_t);
template void dropout_backward<float>(int64_t, const float*, double, uint64_t, uint64_t, float*, int64_t);
template void dropout_backward<double>(int64_t, const double*, double, uint64_t, uint64_t, double*, int64_t);
template void dropout_forward<BFloat16>(int64_t, const BFloat16*, double, uint64_t, uint64_t, BFloat16*, int64_t);
template void dropout_backward<BFloat16>(int64_t, const BFloat16*, double, uint64_t, uint64_t, BFloat16*, int64_t);

}  // namespace zdl::kernels::cpu

// The type a CPU kernel computes in for elements of type T: bf16 in f32 (converted on load,
// rounded to nearest even once on store), f32 and f64 in themselves. A bf16 kernel so gives
// the bits of the f32 kernel on the same (bf16-exact) values, rounded once: what the f32
// detour of autograd/ops/bf16_compute.h gives, without its casts, copies and autograd nodes.
#pragma once
#include <cstdint>
#include <type_traits>

#include "core/dtype.h"

namespace zdl::kernels::cpu {

template <class T> struct compute_type { using type = T; };
template <> struct compute_type<BFloat16> { using type = float; };
template <class T> using compute_t = typename compute_type<T>::type;

// compute_t as a DType: the dtype of a kernel's f32 statistics and scratch for bf16 buffers.
inline DType compute_dtype(DType t) { return t == DType::BF16 ? DType::F32 : t; }

// p[0, n) in the compute type: p itself where that is T, else converted into buf (n elements).
template <class T>
const compute_t<T>* load_compute(const T* p, int64_t n, compute_t<T>* buf) {
  if constexpr (std::is_same_v<T, compute_t<T>>) {
    (void)n;
    (void)buf;
    return p;
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) buf[i] = static_cast<compute_t<T>>(p[i]);
    return buf;
  }
}

// dst[0, n) = src as T: load_compute's way back, rounding once where T is bf16.
template <class T>
void store_compute(int64_t n, const compute_t<T>* src, T* dst) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(src[i]);
}

}  // namespace zdl::kernels::cpu

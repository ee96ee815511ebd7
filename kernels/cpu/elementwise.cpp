#include "kernels/cpu/elementwise.h"

#include <cmath>

#include "core/check.h"
#include "kernels/cpu/compute_type.h"
#include "kernels/cpu/parallel.h"

namespace zdl::kernels::cpu {

namespace {

// f takes and returns the compute type (compute_type.h).
template <class T, class F>
void binary_rows(const StridedRows<3>& it, T* out, const T* a, const T* b, F f) {
  using C = compute_t<T>;
  auto g = [f](T x, T y) { return static_cast<T>(f(static_cast<C>(x), static_cast<C>(y))); };
  int64_t rows = it.rows(), inner = it.inner();
  auto is = it.inner_strides();
  auto row = [&](int64_t r, int64_t lo, int64_t hi) {
    auto off = it.row_offsets(r);
    T* o = out + off[0];
    const T* pa = a + off[1];
    const T* pb = b + off[2];
    if (is[0] == 1 && is[1] == 1 && is[2] == 1) {
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) o[i] = g(pa[i], pb[i]);
    } else if (is[0] == 1 && is[1] == 1 && is[2] == 0) {
      const T bv = pb[0];
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) o[i] = g(pa[i], bv);
    } else if (is[0] == 1 && is[1] == 0 && is[2] == 1) {
      const T av = pa[0];
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) o[i] = g(av, pb[i]);
    } else {
      for (int64_t i = lo; i < hi; ++i) o[i * is[0]] = g(pa[i * is[1]], pb[i * is[2]]);
    }
  };
  parallel_rows(rows, inner, row);
}

template <class T, class F>
void unary_map(int64_t n, const T* x, T* out, F f) {
  parallel_for(n, 4, [&](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) out[i] = f(x[i]);
  });
}

}  // namespace

template <class T>
void binary(BinaryOp op, const StridedRows<3>& it, T* out, const T* a, const T* b) {
  using C = compute_t<T>;
  switch (op) {
    case BinaryOp::Add: return binary_rows(it, out, a, b, [](C x, C y) { return x + y; });
    case BinaryOp::Sub: return binary_rows(it, out, a, b, [](C x, C y) { return x - y; });
    case BinaryOp::Mul: return binary_rows(it, out, a, b, [](C x, C y) { return x * y; });
    case BinaryOp::Div: return binary_rows(it, out, a, b, [](C x, C y) { return x / y; });
    case BinaryOp::Max: return binary_rows(it, out, a, b, [](C x, C y) { return x > y || x != x ? x : y; });
    case BinaryOp::Min: return binary_rows(it, out, a, b, [](C x, C y) { return x < y || x != x ? x : y; });
    case BinaryOp::MaxGrad:
      return binary_rows(it, out, a, b, [](C x, C y) { return x > y ? C(1) : x == y ? C(0.5) : C(0); });
    case BinaryOp::MinGrad:
      return binary_rows(it, out, a, b, [](C x, C y) { return x < y ? C(1) : x == y ? C(0.5) : C(0); });
  }
}

template <class T>
void unary(UnaryOp op, int64_t n, const T* x, T* out, double s) {
  const T ts = static_cast<T>(s);
  switch (op) {
    case UnaryOp::Neg: return unary_map(n, x, out, [](T v) { return -v; });
    case UnaryOp::Exp: return unary_map(n, x, out, [](T v) { return std::exp(v); });
    case UnaryOp::Log: return unary_map(n, x, out, [](T v) { return std::log(v); });
    case UnaryOp::Sqrt: return unary_map(n, x, out, [](T v) { return std::sqrt(v); });
    case UnaryOp::Tanh: return unary_map(n, x, out, [](T v) { return std::tanh(v); });
    case UnaryOp::Square: return unary_map(n, x, out, [](T v) { return v * v; });
    case UnaryOp::AddScalar: return unary_map(n, x, out, [ts](T v) { return v + ts; });
    case UnaryOp::MulScalar: return unary_map(n, x, out, [ts](T v) { return v * ts; });
    case UnaryOp::RSub: return unary_map(n, x, out, [ts](T v) { return ts - v; });
    case UnaryOp::RDiv: return unary_map(n, x, out, [ts](T v) { return ts / v; });
    case UnaryOp::Relu: return unary_map(n, x, out, [](T v) { return v > T(0) ? v : T(0); });
    case UnaryOp::Sigmoid: return unary_map(n, x, out, [](T v) { return T(1) / (T(1) + std::exp(-v)); });
    case UnaryOp::Silu: return unary_map(n, x, out, [](T v) { return v / (T(1) + std::exp(-v)); });
    case UnaryOp::Abs: return unary_map(n, x, out, [](T v) { return std::abs(v); });
  }
}

template <class T>
void unary_backward(UnaryOp op, int64_t n, const T* g, const T* x, T* dx) {
  auto map = [&](auto f) {
    parallel_for(n, 8, [&](int64_t lo, int64_t hi) {
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) dx[i] = f(g[i], x[i]);
    });
  };
  switch (op) {
    case UnaryOp::Relu: return map([](T gv, T v) { return v > T(0) ? gv : T(0); });
    case UnaryOp::Sigmoid:
      return map([](T gv, T v) {
        const T sg = T(1) / (T(1) + std::exp(-v));
        return gv * (sg * (T(1) - sg));
      });
    case UnaryOp::Silu:  // d (v sg) = sg + v sg (1 - sg)
      return map([](T gv, T v) {
        const T sg = T(1) / (T(1) + std::exp(-v));
        return gv * (sg * (T(1) + v * (T(1) - sg)));
      });
    case UnaryOp::Abs: return map([](T gv, T v) { return v > T(0) ? gv : v < T(0) ? -gv : T(0); });
    default: ZDL_CHECK(false, "unary_backward: op ", static_cast<int>(op), " composes its backward in autograd");
  }
}

template <class T>
void select(const StridedRows<4>& it, T* out, const T* cond, const T* a, const T* b) {
  const int64_t rows = it.rows(), inner = it.inner();
  const auto is = it.inner_strides();
  parallel_for(rows, inner, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const auto off = it.row_offsets(r);
      for (int64_t i = 0; i < inner; ++i)
        out[off[0] + i * is[0]] = cond[off[1] + i * is[1]] != T(0) ? a[off[2] + i * is[2]] : b[off[3] + i * is[3]];
    }
  });
}

template <class T>
void argmax_rows(int64_t rows, int64_t n, const T* x, int64_t* out) {
  parallel_for(rows, n, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* p = x + r * n;
      int64_t best = 0;
      for (int64_t i = 1; i < n && p[best] == p[best]; ++i)
        if (p[i] > p[best] || p[i] != p[i]) best = i;
      out[r] = best;
    }
  });
}

template <class T>
void accumulate(const StridedRows<2>& it, T* dst, const T* src) {
  using C = compute_t<T>;
  auto add = [](T d, T s) { return static_cast<T>(static_cast<C>(d) + static_cast<C>(s)); };
  int64_t rows = it.rows(), inner = it.inner();
  auto is = it.inner_strides();
  auto row = [&](int64_t r, int64_t lo, int64_t hi) {
    auto off = it.row_offsets(r);
    T* d = dst + off[0];
    const T* s = src + off[1];
    if (is[0] == 1 && is[1] == 1) {
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) d[i] = add(d[i], s[i]);
    } else {
      for (int64_t i = lo; i < hi; ++i) d[i * is[0]] = add(d[i * is[0]], s[i * is[1]]);
    }
  };
  parallel_rows(rows, inner, row);
}

template <class T>
void scale(int64_t n, T* x, double s) {
  using C = compute_t<T>;
  const C cs = static_cast<C>(s);
  parallel_for(n, 4, [&](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) x[i] = static_cast<T>(static_cast<C>(x[i]) * cs);
  });
}

#define ZDL_INSTANTIATE(T)                                                                  \
  template void binary<T>(BinaryOp, const StridedRows<3>&, T*, const T*, const T*);        \
  template void unary<T>(UnaryOp, int64_t, const T*, T*, double);                          \
  template void unary_backward<T>(UnaryOp, int64_t, const T*, const T*, T*);               \
  template void select<T>(const StridedRows<4>&, T*, const T*, const T*, const T*);        \
  template void argmax_rows<T>(int64_t, int64_t, const T*, int64_t*);                      \
  template void accumulate<T>(const StridedRows<2>&, T*, const T*);                       \
  template void scale<T>(int64_t, T*, double);
ZDL_INSTANTIATE(float)
ZDL_INSTANTIATE(double)
#undef ZDL_INSTANTIATE
template void binary<BFloat16>(BinaryOp, const StridedRows<3>&, BFloat16*, const BFloat16*, const BFloat16*);
template void accumulate<BFloat16>(const StridedRows<2>&, BFloat16*, const BFloat16*);
template void scale<BFloat16>(int64_t, BFloat16*, double);

}  // namespace zdl::kernels::cpu

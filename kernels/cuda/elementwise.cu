// Elementwise CUDA kernels (see elementwise.h). Every formula is the CPU twin's
// (kernels/cpu/elementwise.cpp, and the backward graphs of autograd/ops/elementwise.cpp for
// unary_backward) evaluated in f32 with the same rounding steps; where the CPU rounds a product
// before a subtraction, __fmul_rn keeps nvcc from contracting the two into an FMA.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/strided.cuh"

namespace zdl::kernels::cuda {

namespace {

using cpu::BinaryOp;
using cpu::UnaryOp;

template <BinaryOp Op>
__device__ __forceinline__ float apply_binary(float x, float y) {
  if constexpr (Op == BinaryOp::Add) return x + y;
  else if constexpr (Op == BinaryOp::Sub) return x - y;
  else if constexpr (Op == BinaryOp::Mul) return x * y;
  else if constexpr (Op == BinaryOp::Div) return x / y;
  else if constexpr (Op == BinaryOp::Max) return x > y || x != x ? x : y;
  else if constexpr (Op == BinaryOp::Min) return x < y || x != x ? x : y;
  else if constexpr (Op == BinaryOp::MaxGrad) return x > y ? 1.0f : x == y ? 0.5f : 0.0f;
  else return x < y ? 1.0f : x == y ? 0.5f : 0.0f;  // MinGrad
}

template <UnaryOp Op>
__device__ __forceinline__ float apply_unary(float v, float s) {
  if constexpr (Op == UnaryOp::Neg) return -v;
  else if constexpr (Op == UnaryOp::Exp) return expf(v);
  else if constexpr (Op == UnaryOp::Log) return logf(v);
  else if constexpr (Op == UnaryOp::Sqrt) return sqrtf(v);
  else if constexpr (Op == UnaryOp::Tanh) return tanhf(v);
  else if constexpr (Op == UnaryOp::Square) return v * v;
  else if constexpr (Op == UnaryOp::AddScalar) return v + s;
  else if constexpr (Op == UnaryOp::MulScalar) return v * s;
  else if constexpr (Op == UnaryOp::RSub) return s - v;
  else if constexpr (Op == UnaryOp::RDiv) return s / v;
  else if constexpr (Op == UnaryOp::Relu) return v > 0.0f ? v : 0.0f;
  else if constexpr (Op == UnaryOp::Sigmoid) return 1.0f / (1.0f + expf(-v));
  else if constexpr (Op == UnaryOp::Silu) return v / (1.0f + expf(-v));
  else return fabsf(v);  // Abs
}

// g * f'(x), the CPU backward graph's arithmetic in f32 (see elementwise.h).
template <UnaryOp Op>
__device__ __forceinline__ float apply_unary_grad(float g, float x, float s) {
  if constexpr (Op == UnaryOp::Neg) return -g;
  else if constexpr (Op == UnaryOp::Exp) return g * expf(x);                 // mul(g, out)
  else if constexpr (Op == UnaryOp::Log) return g / x;                       // div(g, a)
  else if constexpr (Op == UnaryOp::Sqrt) return g / (sqrtf(x) * 2.0f);      // div(g, mul(out, 2))
  else if constexpr (Op == UnaryOp::Tanh) {                                  // mul(g, rsub(1, square(out)))
    const float t = tanhf(x);
    return g * (1.0f - __fmul_rn(t, t));
  } else if constexpr (Op == UnaryOp::Square) return (g * x) * 2.0f;       // mul(mul(g, a), 2)
  else if constexpr (Op == UnaryOp::AddScalar) return g;
  else if constexpr (Op == UnaryOp::MulScalar) return g * s;                 // mul(g, s)
  else if constexpr (Op == UnaryOp::RSub) return -g;
  else if constexpr (Op == UnaryOp::RDiv) return -((g * (s / x)) / x);      // neg(div(mul(g, out), a))
  else if constexpr (Op == UnaryOp::Relu) return x > 0.0f ? g : 0.0f;        // cpu::unary_backward from here
  else if constexpr (Op == UnaryOp::Sigmoid) {
    const float sg = 1.0f / (1.0f + expf(-x));
    return g * __fmul_rn(sg, 1.0f - sg);
  } else if constexpr (Op == UnaryOp::Silu) {
    const float sg = 1.0f / (1.0f + expf(-x));
    return g * __fmul_rn(sg, 1.0f + __fmul_rn(x, 1.0f - sg));
  } else return x > 0.0f ? g : x < 0.0f ? -g : 0.0f;  // Abs
}

// ---- kernels ----

// Contiguous operands; kVec: all three 16-byte aligned (common.cuh's map2).
template <class T, BinaryOp Op, bool kVec>
__global__ void binary_kernel(int64_t n, T* out, const T* a, const T* b) {
  map2<T, kVec>(n, a, b, out, [](float x, float y) { return apply_binary<Op>(x, y); });
}

template <class T, BinaryOp Op>
struct BinaryStrided {
  T* out;
  const T* a;
  const T* b;
  template <class I>
  __device__ void operator()(const I (&o)[3]) const {
    out[o[0]] = from_f<T>(apply_binary<Op>(to_f(a[o[1]]), to_f(b[o[2]])));
  }
};

template <class T, UnaryOp Op>
__global__ void unary_kernel(int64_t n, const T* x, T* out, float s) {
  ZDL_GRID_STRIDE(i, n) out[i] = from_f<T>(apply_unary<Op>(to_f(x[i]), s));
}

template <class T, UnaryOp Op>
__global__ void unary_backward_kernel(int64_t n, const T* g, const T* x, T* dx, float s) {
  ZDL_GRID_STRIDE(i, n) dx[i] = from_f<T>(apply_unary_grad<Op>(to_f(g[i]), to_f(x[i]), s));
}

template <class T>
struct DivGradB {
  T* d;
  const T* g;
  const T* a;
  const T* b;
  template <class I>
  __device__ void operator()(const I (&o)[4]) const {
    const float bv = to_f(b[o[3]]);
    d[o[0]] = from_f<T>(-((to_f(g[o[1]]) / bv) * (to_f(a[o[2]]) / bv)));
  }
};

template <class T>
struct Select {
  T* out;
  const T* cond;
  const T* a;
  const T* b;
  template <class I>
  __device__ void operator()(const I (&o)[4]) const {
    out[o[0]] = to_f(cond[o[1]]) != 0.0f ? a[o[2]] : b[o[3]];
  }
};

// One thread per row: the first largest element (a NaN wins), as cpu::argmax_rows.
template <class T>
__global__ void argmax_kernel(int64_t rows, int64_t n, const T* x, int64_t* out) {
  ZDL_GRID_STRIDE(r, rows) {
    const T* p = x + r * n;
    int64_t best = 0;
    float bv = to_f(p[0]);
    for (int64_t i = 1; i < n && bv == bv; ++i) {
      const float v = to_f(p[i]);
      if (v > bv || v != v) best = i, bv = v;
    }
    out[r] = best;
  }
}

template <class T>
struct Accumulate {
  T* dst;
  const T* src;
  template <class I>
  __device__ void operator()(const I (&o)[2]) const {
    dst[o[0]] = from_f<T>(to_f(dst[o[0]]) + to_f(src[o[1]]));
  }
};

// dst += src over contiguous operands: Accumulate's arithmetic, in 16-byte packs where kVec.
template <class T, bool kVec>
__global__ void accumulate_kernel(int64_t n, T* dst, const T* src) {
  map2<T, kVec>(n, dst, src, dst, [](float d, float v) { return d + v; });
}

template <class T, bool kVec>
__global__ void scale_kernel(int64_t n, T* x, float s) {
  map1<T, kVec>(n, x, x, [s](float v) { return v * s; });
}

// kVec: both sides 16-byte aligned; groups of 8 elements (16 bytes of bf16, 32 of f32) are
// read and written in 16-byte packs, the n % 8 tail one by one.
template <class From, class To, bool kVec>
__global__ void cast_kernel(int64_t n, const From* in, To* out) {
  constexpr int E = 8, LI = Pack<From>::kN, LO = Pack<To>::kN;
  const int64_t groups = kVec ? n / E : 0;
  ZDL_GRID_STRIDE(g, groups) {
    float v[E];
#pragma unroll
    for (int p = 0; p < E / LI; ++p) {
      const Pack<From> x = load_pack(in + g * E + p * LI);
#pragma unroll
      for (int k = 0; k < LI; ++k) v[p * LI + k] = to_f(x.v[k]);
    }
#pragma unroll
    for (int p = 0; p < E / LO; ++p) {
      Pack<To> o;
#pragma unroll
      for (int k = 0; k < LO; ++k) o.v[k] = from_f<To>(v[p * LO + k]);
      store_pack(out + g * E + p * LO, o);
    }
  }
  ZDL_GRID_STRIDE(j, n - groups * E) out[groups * E + j] = from_f<To>(to_f(in[groups * E + j]));
}

template <class From, class To>
void launch_cast(int64_t n, const From* in, To* out, cudaStream_t s) {
  const bool vec = aligned16(in) && aligned16(out);
  (vec ? cast_kernel<From, To, true> : cast_kernel<From, To, false>)<<<grid_for(vec ? n / 8 + n % 8 : n), kBlock, 0,
                                                                       s>>>(n, in, out);
}

template <class T>
__global__ void fill_rows_kernel(int64_t rows, int64_t cols, const T* row, T* out) {
  ZDL_GRID_STRIDE(i, rows * cols) out[i] = row[i % cols];
}

// ---- launchers (typed, on a stream) ----

template <class T, BinaryOp Op>
void launch_binary(const StridedRows<3>& it, void* out, const void* a, const void* b, cudaStream_t s) {
  auto* o = static_cast<T*>(out);
  auto* pa = static_cast<const T*>(a);
  auto* pb = static_cast<const T*>(b);
  if (strided_all_contiguous(it)) {
    const int64_t n = strided_numel(it);
    const bool vec = aligned16(o) && aligned16(pa) && aligned16(pb);
    (vec ? binary_kernel<T, Op, true> : binary_kernel<T, Op, false>)<<<map_grid<T>(n, vec), kBlock, 0, s>>>(n, o, pa,
                                                                                                            pb);
    ZDL_CUDA_CHECK_LAUNCH();
    return;
  }
  launch_strided(it, BinaryStrided<T, Op>{o, pa, pb}, "cuda binary op");
}

template <class T>
void launch_binary(BinaryOp op, const StridedRows<3>& it, void* out, const void* a, const void* b, cudaStream_t s) {
  switch (op) {
    case BinaryOp::Add: return launch_binary<T, BinaryOp::Add>(it, out, a, b, s);
    case BinaryOp::Sub: return launch_binary<T, BinaryOp::Sub>(it, out, a, b, s);
    case BinaryOp::Mul: return launch_binary<T, BinaryOp::Mul>(it, out, a, b, s);
    case BinaryOp::Div: return launch_binary<T, BinaryOp::Div>(it, out, a, b, s);
    case BinaryOp::Max: return launch_binary<T, BinaryOp::Max>(it, out, a, b, s);
    case BinaryOp::Min: return launch_binary<T, BinaryOp::Min>(it, out, a, b, s);
    case BinaryOp::MaxGrad: return launch_binary<T, BinaryOp::MaxGrad>(it, out, a, b, s);
    case BinaryOp::MinGrad: return launch_binary<T, BinaryOp::MinGrad>(it, out, a, b, s);
  }
}

// Calls body(std::integral_constant<UnaryOp, op>{}) so kernels get the op as a template argument.
template <class Body>
void dispatch_unary(UnaryOp op, Body&& body) {
  switch (op) {
    case UnaryOp::Neg: return body(std::integral_constant<UnaryOp, UnaryOp::Neg>{});
    case UnaryOp::Exp: return body(std::integral_constant<UnaryOp, UnaryOp::Exp>{});
    case UnaryOp::Log: return body(std::integral_constant<UnaryOp, UnaryOp::Log>{});
    case UnaryOp::Sqrt: return body(std::integral_constant<UnaryOp, UnaryOp::Sqrt>{});
    case UnaryOp::Tanh: return body(std::integral_constant<UnaryOp, UnaryOp::Tanh>{});
    case UnaryOp::Square: return body(std::integral_constant<UnaryOp, UnaryOp::Square>{});
    case UnaryOp::AddScalar: return body(std::integral_constant<UnaryOp, UnaryOp::AddScalar>{});
    case UnaryOp::MulScalar: return body(std::integral_constant<UnaryOp, UnaryOp::MulScalar>{});
    case UnaryOp::RSub: return body(std::integral_constant<UnaryOp, UnaryOp::RSub>{});
    case UnaryOp::RDiv: return body(std::integral_constant<UnaryOp, UnaryOp::RDiv>{});
    case UnaryOp::Relu: return body(std::integral_constant<UnaryOp, UnaryOp::Relu>{});
    case UnaryOp::Sigmoid: return body(std::integral_constant<UnaryOp, UnaryOp::Sigmoid>{});
    case UnaryOp::Silu: return body(std::integral_constant<UnaryOp, UnaryOp::Silu>{});
    case UnaryOp::Abs: return body(std::integral_constant<UnaryOp, UnaryOp::Abs>{});
  }
  ZDL_CHECK(false, "cuda unary op: unknown op ", static_cast<int>(op));
}

}  // namespace

// ---- entry points ----

void binary(cpu::BinaryOp op, DType dtype, int64_t n, void* out, const void* a, const void* b) {
  if (n == 0) return;
  StridedRows<3> it;
  it.shape = {n};
  for (auto& st : it.strides) st = {1};
  binary(op, dtype, it, out, a, b);
}

void binary(cpu::BinaryOp op, DType dtype, const StridedRows<3>& it, void* out, const void* a, const void* b) {
  if (strided_numel(it) == 0) return;
  auto run = [&](auto tag) { launch_binary<decltype(tag)>(op, it, out, a, b, compute_stream()); };
  ZDL_CUDA_DISPATCH_FLOAT(dtype, "cuda binary op", run);
}

void unary(cpu::UnaryOp op, DType dtype, int64_t n, const void* x, void* out, double s) {
  if (n == 0) return;
  const float fs = static_cast<float>(s);  // as the CPU twin: static_cast<T>(s), computed in f32
  auto run = [&](auto tag) {
    using T = decltype(tag);
    dispatch_unary(op, [&](auto op_c) {
      unary_kernel<T, decltype(op_c)::value><<<grid_for(n), kBlock, 0, compute_stream()>>>(
          n, static_cast<const T*>(x), static_cast<T*>(out), fs);
      ZDL_CUDA_CHECK_LAUNCH();
    });
  };
  ZDL_CUDA_DISPATCH_FLOAT(dtype, "cuda unary op", run);
}

void unary_backward(cpu::UnaryOp op, DType dtype, int64_t n, const void* g, const void* x, void* dx, double s) {
  if (n == 0) return;
  const float fs = static_cast<float>(s);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    dispatch_unary(op, [&](auto op_c) {
      unary_backward_kernel<T, decltype(op_c)::value><<<grid_for(n), kBlock, 0, compute_stream()>>>(
          n, static_cast<const T*>(g), static_cast<const T*>(x), static_cast<T*>(dx), fs);
      ZDL_CUDA_CHECK_LAUNCH();
    });
  };
  ZDL_CUDA_DISPATCH_FLOAT(dtype, "cuda unary backward", run);
}

void div_grad_b(DType dtype, const StridedRows<4>& it, void* d, const void* g, const void* a, const void* b) {
  if (strided_numel(it) == 0) return;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    launch_strided(it,
                   DivGradB<T>{static_cast<T*>(d), static_cast<const T*>(g), static_cast<const T*>(a),
                               static_cast<const T*>(b)},
                   "cuda div backward");
  };
  ZDL_CUDA_DISPATCH_FLOAT(dtype, "cuda div backward", run);
}

void select(DType dtype, const StridedRows<4>& it, void* out, const void* cond, const void* a, const void* b) {
  if (strided_numel(it) == 0) return;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    launch_strided(it,
                   Select<T>{static_cast<T*>(out), static_cast<const T*>(cond), static_cast<const T*>(a),
                             static_cast<const T*>(b)},
                   "cuda where");
  };
  ZDL_CUDA_DISPATCH_FLOAT(dtype, "cuda where", run);
}

void argmax_rows(DType dtype, int64_t rows, int64_t n, const void* x, int64_t* out) {
  if (rows == 0) return;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    argmax_kernel<T><<<grid_for(rows), kBlock, 0, compute_stream()>>>(rows, n, static_cast<const T*>(x), out);
    ZDL_CUDA_CHECK_LAUNCH();
  };
  ZDL_CUDA_DISPATCH_FLOAT(dtype, "cuda argmax", run);
}

void accumulate(DType dtype, const StridedRows<2>& it, void* dst, const void* src) {
  if (strided_numel(it) == 0) return;
  for (size_t d = 0; d < it.shape.size(); ++d)
    ZDL_CHECK(it.shape[d] == 1 || it.strides[0][d] != 0, "cuda accumulate: the destination has overlapping elements "
              "(stride 0 over a dimension of size ", it.shape[d], ", iteration shape=", shape_str(it.shape),
              "); accumulate into a materialized tensor");
  auto run = [&](auto tag) {
    using T = decltype(tag);
    if (strided_all_contiguous(it)) {
      const int64_t n = strided_numel(it);
      const bool vec = aligned16(dst) && aligned16(src);
      (vec ? accumulate_kernel<T, true> : accumulate_kernel<T, false>)<<<map_grid<T>(n, vec), kBlock, 0,
                                                                        compute_stream()>>>(
          n, static_cast<T*>(dst), static_cast<const T*>(src));
      ZDL_CUDA_CHECK_LAUNCH();
      return;
    }
    launch_strided(it, Accumulate<T>{static_cast<T*>(dst), static_cast<const T*>(src)}, "cuda accumulate");
  };
  ZDL_CUDA_DISPATCH_FLOAT(dtype, "cuda accumulate", run);
}

void scale(DType dtype, int64_t n, void* x, double s) {
  if (n == 0) return;
  const float fs = static_cast<float>(s);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const bool vec = aligned16(x);
    (vec ? scale_kernel<T, true> : scale_kernel<T, false>)<<<map_grid<T>(n, vec), kBlock, 0, compute_stream()>>>(
        n, static_cast<T*>(x), fs);
    ZDL_CUDA_CHECK_LAUNCH();
  };
  ZDL_CUDA_DISPATCH_FLOAT(dtype, "cuda scale", run);
}

void cast(DType from, DType to, int64_t n, const void* in, void* out) {
  if (n == 0) return;
  cudaStream_t s = compute_stream();
  if (from == DType::F32 && to == DType::BF16) {
    launch_cast(n, static_cast<const float*>(in), static_cast<__nv_bfloat16*>(out), s);
  } else if (from == DType::BF16 && to == DType::F32) {
    launch_cast(n, static_cast<const __nv_bfloat16*>(in), static_cast<float*>(out), s);
  } else {
    ZDL_CHECK(false, "cuda cast ", dtype_name(from), " -> ", dtype_name(to), " not supported (f32 <-> bf16)");
  }
  ZDL_CUDA_CHECK_LAUNCH();
}

void fill_rows(DType dtype, int64_t rows, int64_t cols, const void* row, void* out) {
  if (rows == 0 || cols == 0) return;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    fill_rows_kernel<T><<<grid_for(rows * cols), kBlock, 0, compute_stream()>>>(rows, cols, static_cast<const T*>(row),
                                                                               static_cast<T*>(out));
    ZDL_CUDA_CHECK_LAUNCH();
  };
  ZDL_CUDA_DISPATCH_FLOAT(dtype, "cuda fill_rows", run);
}

}  // namespace zdl::kernels::cuda

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/elementwise.h"

namespace zdl::kernels::cuda {

namespace {

template <class T, int Op>
__global__ void binary_kernel(int64_t n, T* out, const T* a, const T* b) {
  ZDL_GRID_STRIDE(i, n) {
    float x = to_f(a[i]), y = to_f(b[i]), r;
    if constexpr (Op == 0) r = x + y;
    else if constexpr (Op == 1) r = x - y;
    else if constexpr (Op == 2) r = x * y;
    else r = x / y;
    out[i] = from_f<T>(r);
  }
}

template <class From, class To>
__global__ void cast_kernel(int64_t n, const From* in, To* out) {
  ZDL_GRID_STRIDE(i, n) out[i] = from_f<To>(to_f(in[i]));
}

template <class T>
void launch_binary(cpu::BinaryOp op, int64_t n, void* out, const void* a, const void* b, cudaStream_t s) {
  auto* o = static_cast<T*>(out);
  auto* pa = static_cast<const T*>(a);
  auto* pb = static_cast<const T*>(b);
  switch (op) {
    case cpu::BinaryOp::Add: binary_kernel<T, 0><<<grid_for(n), kBlock, 0, s>>>(n, o, pa, pb); break;
    case cpu::BinaryOp::Sub: binary_kernel<T, 1><<<grid_for(n), kBlock, 0, s>>>(n, o, pa, pb); break;
    case cpu::BinaryOp::Mul: binary_kernel<T, 2><<<grid_for(n), kBlock, 0, s>>>(n, o, pa, pb); break;
    case cpu::BinaryOp::Div: binary_kernel<T, 3><<<grid_for(n), kBlock, 0, s>>>(n, o, pa, pb); break;
  }
  ZDL_CUDA_CHECK_LAUNCH();
}

}  // namespace

void binary(cpu::BinaryOp op, DType dtype, int64_t n, void* out, const void* a, const void* b) {
  if (n == 0) return;
  auto run = [&](auto tag) { launch_binary<decltype(tag)>(op, n, out, a, b, compute_stream()); };
  ZDL_CUDA_DISPATCH_FLOAT(dtype, "cuda binary op", run);
}

void cast(DType from, DType to, int64_t n, const void* in, void* out) {
  if (n == 0) return;
  cudaStream_t s = compute_stream();
  if (from == DType::F32 && to == DType::BF16) {
    cast_kernel<<<grid_for(n), kBlock, 0, s>>>(n, static_cast<const float*>(in), static_cast<__nv_bfloat16*>(out));
  } else if (from == DType::BF16 && to == DType::F32) {
    cast_kernel<<<grid_for(n), kBlock, 0, s>>>(n, static_cast<const __nv_bfloat16*>(in), static_cast<float*>(out));
  } else {
    ZDL_CHECK(false, "cuda cast ", dtype_name(from), " -> ", dtype_name(to), " not supported (f32 <-> bf16)");
  }
  ZDL_CUDA_CHECK_LAUNCH();
}

}  // namespace zdl::kernels::cuda

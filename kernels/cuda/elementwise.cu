#include <cuda_bf16.h>

#include "core/cuda_check.h"
#include "kernels/cuda/elementwise.h"

namespace zdl::kernels::cuda {

namespace {

constexpr int kBlock = 256;

inline unsigned grid_for(int64_t n) {
  int64_t blocks = (n + kBlock - 1) / kBlock;
  return static_cast<unsigned>(blocks < 65535 * 16 ? blocks : 65535 * 16);
}

template <class T>
__device__ __forceinline__ float load_f(const T* p, int64_t i) { return static_cast<float>(p[i]); }

template <class T, int Op>
__global__ void binary_kernel(int64_t n, T* out, const T* a, const T* b) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float x = load_f(a, i), y = load_f(b, i), r;
    if constexpr (Op == 0) r = x + y;
    else if constexpr (Op == 1) r = x - y;
    else if constexpr (Op == 2) r = x * y;
    else r = x / y;
    out[i] = static_cast<T>(r);
  }
}

template <class From, class To>
__global__ void cast_kernel(int64_t n, const From* in, To* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = static_cast<To>(static_cast<float>(in[i]));
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
  cudaStream_t s = cudaStreamPerThread;
  switch (dtype) {
    case DType::F32: return launch_binary<float>(op, n, out, a, b, s);
    case DType::BF16: return launch_binary<__nv_bfloat16>(op, n, out, a, b, s);
    default: ZDL_CHECK(false, "cuda binary op: dtype ", dtype_name(dtype), " not supported (f32, bf16)");
  }
}

void cast(DType from, DType to, int64_t n, const void* in, void* out) {
  if (n == 0) return;
  cudaStream_t s = cudaStreamPerThread;
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

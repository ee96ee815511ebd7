// Argument checks shared by the differentiable ops: defined, same dtype/device, floating,
// and the device the op has kernels for. Messages name the op and show both sides.
#pragma once
#include <initializer_list>

#include "core/tensor.h"

namespace zdl::ops_detail {

// Checks that all tensors are defined, floating, on one device and of one dtype.
void check_float_args(const char* op, std::initializer_list<const Tensor*> ts);
// Throws a clear error when the op has no kernel for the tensor's device.
void check_cpu(const char* op, const Tensor& t);
// True when t lives on a CUDA device, after checking that its dtype has CUDA kernels (f32,
// bf16; an f64 tensor on CUDA throws naming the op); false on the CPU. An op with CUDA kernels
// dispatches on it (CPU-only builds never see a CUDA tensor: their allocator refuses one):
//   #ifdef ZDL_WITH_CUDA
//     if (on_cuda("gelu", x)) { ... kernels::cuda::... ; return out; }
//   #endif
//     check_cpu("gelu", x);
bool on_cuda(const char* op, const Tensor& t);
// Strides of `t` broadcast to `out_shape` (0 on broadcast and missing leading dims).
Shape broadcast_strides(const Tensor& t, const Shape& out_shape);

}  // namespace zdl::ops_detail

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
// Strides of `t` broadcast to `out_shape` (0 on broadcast and missing leading dims).
Shape broadcast_strides(const Tensor& t, const Shape& out_shape);

}  // namespace zdl::ops_detail

#include "autograd/ops/op_checks.h"

namespace zdl::ops_detail {

void check_float_args(const char* op, std::initializer_list<const Tensor*> ts) {
  const Tensor* first = nullptr;
  int i = 0;
  for (const Tensor* t : ts) {
    ZDL_CHECK(t->defined(), op, ": argument ", i, " is an undefined tensor");
    ZDL_CHECK(is_floating(t->dtype()), op, ": expected a floating-point tensor, got ", dtype_name(t->dtype()),
              " for argument ", i, " (shape=", shape_str(t->shape()), ")");
    if (first) {
      check_same_device(*first, *t, op);
      check_same_dtype(*first, *t, op);
    } else {
      first = t;
    }
    ++i;
  }
}

void check_cpu(const char* op, const Tensor& t) {
  ZDL_CHECK(t.device().is_cpu(), op, ": no kernel for device ", t.device().str(),
            " yet (move the tensor to the CPU with .to(Device::cpu()))");
}

bool on_cuda(const char* op, const Tensor& t) {
  if (!t.device().is_cuda()) return false;
  ZDL_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::BF16, op, ": dtype ", dtype_name(t.dtype()),
            " has no CUDA kernel (f32, bf16), tensor of shape=", shape_str(t.shape()), " on ", t.device().str(),
            "; cast it or compute on the CPU");
  return true;
}

Shape broadcast_strides(const Tensor& t, const Shape& out_shape) {
  Shape st(out_shape.size(), 0);
  int64_t lead = static_cast<int64_t>(out_shape.size()) - t.dim();
  for (int64_t i = 0; i < t.dim(); ++i) st[lead + i] = t.shape()[i] == 1 ? 0 : t.strides()[i];
  return st;
}

}  // namespace zdl::ops_detail

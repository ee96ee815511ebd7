#include "autograd/ops/bf16_compute.h"

#include "autograd/ops.h"
#include "autograd/ops/op_checks.h"

namespace zdl::ops_detail {

bool bf16_on_cpu(const char* op, std::initializer_list<const Tensor*> ts) {
  ZDL_CHECK(ts.size() > 0, op, ": no floating arguments to check");
  check_float_args(op, ts);
  const Tensor& first = **ts.begin();
  return first.dtype() == DType::BF16 && first.device().is_cpu();
}

Tensor to_f32(const Tensor& t) { return t.defined() ? cast(t, DType::F32) : t; }

Tensor to_bf16(const Tensor& t) { return cast(t, DType::BF16); }

}  // namespace zdl::ops_detail

// Sum and mean over dimensions. Backward of a sum broadcasts the gradient back (expand),
// mean divides by the number of reduced elements.
//
// On CUDA (f32, bf16) the reduction runs natively (kernels/cuda/reduce.h: double accumulation
// in a fixed order, deterministic), and mean scales inside the same kernel: the f32 sum times
// (float)(1/count), rounded once, which is what the CPU computes for f32 (sum, then mul) and,
// through its f32 detour, for bf16.
#include <algorithm>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/ops/bf16_compute.h"
#include "autograd/ops/op_checks.h"
#include "kernels/cpu/reduce.h"
#ifdef ZDL_WITH_CUDA
#include "kernels/cuda/reduce.h"
#endif

namespace zdl {

using autograd::TensorList;
using namespace ops_detail;

namespace {

// Normalized, sorted, unique reduction dims.
std::vector<int64_t> normalize_dims(const Tensor& a, const std::vector<int64_t>& dims) {
  if (a.dim() == 0) {  // as PyTorch: dimension 0 (or -1) of a scalar is the scalar itself, nothing to reduce
    for (int64_t d : dims)
      ZDL_CHECK(d == 0 || d == -1, "dimension ", d, " out of range for a 0-d tensor");
    return {};
  }
  std::vector<int64_t> out;
  for (int64_t d : dims) out.push_back(a.wrap_dim(d));
  std::sort(out.begin(), out.end());
  ZDL_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), "sum: repeated dimension in dims for shape=",
            shape_str(a.shape()));
  return out;
}

Shape reduced_shape(const Shape& s, const std::vector<int64_t>& dims, bool keepdim) {
  Shape out;
  for (int64_t i = 0; i < static_cast<int64_t>(s.size()); ++i) {
    bool red = std::binary_search(dims.begin(), dims.end(), i);
    if (!red) out.push_back(s[i]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

// Forward of sum over dims (no graph); out = scale * sum (scale only on CUDA, see above).
Tensor sum_forward(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim, double scale = 1.0) {
  Shape out_shape = reduced_shape(a.shape(), dims, keepdim);
  // Bring reduced dims together: if they form one contiguous block of dims, the contiguous
  // input is already [outer, reduce, inner]; otherwise permute reduced dims to the end.
  Tensor x = a;
  bool block = dims.empty() || dims.back() - dims.front() + 1 == static_cast<int64_t>(dims.size());
  int64_t outer = 1, red = 1, inner = 1;
  if (block && !dims.empty()) {
    for (int64_t i = 0; i < a.dim(); ++i) {
      if (i < dims.front()) outer *= a.shape()[i];
      else if (i <= dims.back()) red *= a.shape()[i];
      else inner *= a.shape()[i];
    }
  } else {
    std::vector<int64_t> perm;
    for (int64_t i = 0; i < a.dim(); ++i)
      if (!std::binary_search(dims.begin(), dims.end(), i)) perm.push_back(i);
    for (int64_t d : dims) perm.push_back(d);
    x = permute(a.detach(), perm);
    for (int64_t d : dims) red *= a.shape()[d];
    outer = red == 0 ? 0 : a.numel() / std::max<int64_t>(red, 1);
    if (red == 0) outer = numel_of(reduced_shape(a.shape(), dims, false));
  }
  Tensor xc = x.is_contiguous() ? x : x.contiguous_copy();
  Tensor out = Tensor::empty(out_shape, a.dtype(), a.device());
  if (red == 0) {
    out.zero_();
    return out;
  }
  if (out.numel() == 0) return out;
#ifdef ZDL_WITH_CUDA
  if (a.device().is_cuda()) {
    const size_t ws_bytes = kernels::cuda::sum_reduce_workspace_bytes(outer, red, inner);
    Tensor ws;
    if (ws_bytes > 0) {
      MemoryScope scope(MemoryCategory::Workspace);
      ws = Tensor::empty({static_cast<int64_t>(ws_bytes / sizeof(double))}, DType::F64, a.device());
    }
    kernels::cuda::sum_reduce(a.dtype(), outer, red, inner, xc.raw_data(), out.raw_data(),
                              ws.defined() ? ws.raw_data() : nullptr, scale);
    return out;
  }
#endif
  ZDL_CHECK(scale == 1.0, "sum: internal error, scaled sum on the CPU");
  ZDL_DISPATCH_FLOAT_OR_BF16(a.dtype(), "sum", [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::sum_reduce<T>(outer, red, inner, xc.data<T>(), out.data<T>());
  });
  return out;
}

}  // namespace

Tensor sum(const Tensor& a, const std::vector<int64_t>& dims_in, bool keepdim) {
  check_float_args("sum", {&a});
  if (!on_cuda("sum", a)) check_cpu("sum", a);
  std::vector<int64_t> dims = normalize_dims(a, dims_in);
  Tensor out = sum_forward(a, dims, keepdim);
  // d sum / dx = 1 everywhere: broadcast g (with reduced dims restored as size 1) to x's shape.
  return autograd::record("sum", {a}, out, [in_shape = a.shape(), dims](const TensorList& g) {
    Tensor gk = reshape(g[0], reduced_shape(in_shape, dims, /*keepdim=*/true));
    return TensorList{contiguous(expand(gk, in_shape))};
  });
}

Tensor sum(const Tensor& a) {
  check_defined(a, "sum", "a");
  std::vector<int64_t> all(static_cast<size_t>(a.dim()));
  for (int64_t i = 0; i < a.dim(); ++i) all[i] = i;
  return sum(a, all, false);
}

namespace {

// CUDA mean: the scaled sum in one kernel. Backward: d mean / dx = scale everywhere, i.e. the
// CPU graph's mul(g, scale) broadcast back to x's shape.
Tensor mean_cuda(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim, double scale) {
  Tensor out = sum_forward(a, dims, keepdim, scale);
  return autograd::record("mean", {a}, out, [in_shape = a.shape(), dims, scale](const TensorList& g) {
    Tensor gk = reshape(mul(g[0], scale), reduced_shape(in_shape, dims, /*keepdim=*/true));
    return TensorList{contiguous(expand(gk, in_shape))};
  });
}

}  // namespace

Tensor mean(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  check_defined(a, "mean", "a");
  int64_t count = 1;
  for (int64_t d : normalize_dims(a, dims)) count *= a.shape()[d];
  ZDL_CHECK(count > 0, "mean over zero elements (shape=", shape_str(a.shape()), ")");
  // bf16: one rounding of the f32 mean, not one after the sum and another after the scaling.
  if (bf16_on_cpu("mean", {&a})) return to_bf16(mean(to_f32(a), dims, keepdim));
  if (on_cuda("mean", a)) return mean_cuda(a, normalize_dims(a, dims), keepdim, 1.0 / static_cast<double>(count));
  return mul(sum(a, dims, keepdim), 1.0 / static_cast<double>(count));
}

Tensor mean(const Tensor& a) {
  check_defined(a, "mean", "a");
  ZDL_CHECK(a.numel() > 0, "mean of an empty tensor (shape=", shape_str(a.shape()), ")");
  if (bf16_on_cpu("mean", {&a})) return to_bf16(mean(to_f32(a)));
  if (on_cuda("mean", a)) {
    std::vector<int64_t> all(static_cast<size_t>(a.dim()));
    for (int64_t i = 0; i < a.dim(); ++i) all[i] = i;
    return mean_cuda(a, all, /*keepdim=*/false, 1.0 / static_cast<double>(a.numel()));
  }
  return mul(sum(a), 1.0 / static_cast<double>(a.numel()));
}

}  // namespace zdl

// Elementwise ops with numpy broadcasting; each forward next to its backward.
// Backward of a broadcast input sums the gradient over the broadcast dimensions (sum_to).
#include <cmath>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/ops/bf16_compute.h"
#include "autograd/ops/op_checks.h"
#include "kernels/cpu/elementwise.h"
#ifdef ZDL_WITH_CUDA
#include "kernels/cuda/elementwise.h"
#endif

namespace zdl {

using autograd::TensorList;
using kernels::cpu::BinaryOp;
using kernels::cpu::UnaryOp;
using namespace ops_detail;

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    ZDL_CHECK(da == db || da == 1 || db == 1, "shapes ", shape_str(a), " and ", shape_str(b),
              " cannot be broadcast together (dimension ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  std::vector<int64_t> dims;
  int64_t lead = g.dim() - static_cast<int64_t>(shape.size());
  ZDL_CHECK(lead >= 0, "sum_to: cannot reduce shape=", shape_str(g.shape()), " to ", shape_str(shape));
  for (int64_t i = 0; i < g.dim(); ++i)
    if (i < lead || (shape[i - lead] == 1 && g.shape()[i] != 1)) dims.push_back(i);
  Tensor s = dims.empty() ? g : sum(g, dims, /*keepdim=*/true);
  return reshape(s, shape);
}

namespace {

Tensor binary_forward(BinaryOp op, const char* name, const Tensor& a, const Tensor& b) {
  check_float_args(name, {&a, &b});
#ifdef ZDL_WITH_CUDA
  if (on_cuda(name, a)) {
    Shape out_shape = broadcast_shapes(a.shape(), b.shape());
    Tensor out = Tensor::empty(out_shape, a.dtype(), a.device());
    if (out.numel() == 0) return out;
    StridedRows<3> it;
    it.shape = out_shape;
    it.strides = {out.strides(), broadcast_strides(a, out_shape), broadcast_strides(b, out_shape)};
    kernels::cuda::binary(op, a.dtype(), coalesce(it), out.raw_data(), a.raw_data(), b.raw_data());
    return out;
  }
#endif
  check_cpu(name, a);
  Shape out_shape = broadcast_shapes(a.shape(), b.shape());
  Tensor out = Tensor::empty(out_shape, a.dtype(), a.device());
  if (out.numel() == 0) return out;
  StridedRows<3> it;
  it.shape = out_shape;
  it.strides = {out.strides(), broadcast_strides(a, out_shape), broadcast_strides(b, out_shape)};
  it = coalesce(it);
  ZDL_DISPATCH_FLOAT_OR_BF16(a.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::binary<T>(op, it, out.data<T>(), a.data<T>(), b.data<T>());
  });
  return out;
}

Tensor unary_forward(UnaryOp op, const char* name, const Tensor& a, double s = 0.0) {
  check_float_args(name, {&a});
#ifdef ZDL_WITH_CUDA
  if (on_cuda(name, a)) {
    Tensor x = a.is_contiguous() ? a : a.contiguous_copy();
    Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
    kernels::cuda::unary(op, a.dtype(), x.numel(), x.raw_data(), out.raw_data(), s);
    return out;
  }
#endif
  check_cpu(name, a);
  Tensor x = a.is_contiguous() ? a : a.contiguous_copy();
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  ZDL_DISPATCH_FLOAT(a.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::unary<T>(op, x.numel(), x.data<T>(), out.data<T>(), s);
  });
  return out;
}

// CUDA backward of a unary op: g * f'(a) in one kernel, from the saved *input* a, in f32
// (kernels/cuda/elementwise.h unary_backward). Same formula as the CPU graphs below, but a bf16
// gradient is rounded once instead of once per backward op, as the CPU's f32 detour rounds it.
Tensor cuda_unary_grad(UnaryOp op, const Tensor& g, const Tensor& a, double s) {
#ifdef ZDL_WITH_CUDA
  check_same_device(g, a, "unary backward");
  check_same_dtype(g, a, "unary backward");
  Tensor gc = g.is_contiguous() ? g : g.contiguous_copy();
  Tensor ac = a.is_contiguous() ? a : a.contiguous_copy();
  Tensor dx = Tensor::empty(a.shape(), a.dtype(), a.device());
  kernels::cuda::unary_backward(op, a.dtype(), a.numel(), gc.raw_data(), ac.raw_data(), dx.raw_data(), s);
  return dx;
#else
  (void)op, (void)g, (void)s;
  ZDL_CHECK(false, "unary backward on ", a.device().str(), ": this zerodl build has no CUDA support");
  return Tensor();
#endif
}

// CUDA: -(g / b) * (a / b) over g's shape (a and b broadcast), before sum_to; see
// kernels/cuda/elementwise.h div_grad_b.
Tensor cuda_div_grad_b(const Tensor& g, const Tensor& a, const Tensor& b) {
#ifdef ZDL_WITH_CUDA
  check_float_args("div backward", {&g, &a, &b});
  Tensor d = Tensor::empty(g.shape(), g.dtype(), g.device());
  if (d.numel() == 0) return d;
  StridedRows<4> it;
  it.shape = g.shape();
  it.strides = {d.strides(), g.strides(), broadcast_strides(a, g.shape()), broadcast_strides(b, g.shape())};
  kernels::cuda::div_grad_b(g.dtype(), coalesce(it), d.raw_data(), g.raw_data(), a.raw_data(), b.raw_data());
  return d;
#else
  (void)a, (void)b;
  ZDL_CHECK(false, "div backward on ", g.device().str(), ": this zerodl build has no CUDA support");
  return Tensor();
#endif
}

// [Note: bf16 broadcast gradients] The gradient of a broadcast operand of mul/div is a sum of
// products (sum_to). Rounding every product to bf16 before summing would make the sum's error
// grow with its cancellation (a few percent of a small result), so when a bf16 operand was
// broadcast, the products are formed and summed in f32 and rounded to bf16 once. Same-shape
// operands need no sum: their native bf16 product is already rounded once.
bool broadcast_bf16(const Tensor& g, const Shape& sa, const Shape& sb) {
  return g.dtype() == DType::BF16 && (sa != g.shape() || sb != g.shape());
}

// Records a unary op whose backward runs cuda_unary_grad (CUDA inputs only).
Tensor record_cuda_unary(const char* name, UnaryOp op, const Tensor& a, const Tensor& out, double s = 0.0) {
  return autograd::record(
      name, {a}, out, [op, a, s](const TensorList& g) { return TensorList{cuda_unary_grad(op, g[0], a, s)}; }, {a});
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(BinaryOp::Add, "add", a, b);
  // d(a+b)/da = 1, d(a+b)/db = 1
  return autograd::record("add", {a, b}, out, [sa = a.shape(), sb = b.shape()](const TensorList& g) {
    return TensorList{sum_to(g[0], sa), sum_to(g[0], sb)};
  });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(BinaryOp::Sub, "sub", a, b);
  // d(a-b)/da = 1, d(a-b)/db = -1
  return autograd::record("sub", {a, b}, out, [sa = a.shape(), sb = b.shape()](const TensorList& g) {
    return TensorList{sum_to(g[0], sa), sum_to(neg(g[0]), sb)};
  });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(BinaryOp::Mul, "mul", a, b);
  // d(ab)/da = b, d(ab)/db = a
  bool ga = a.requires_grad(), gb = b.requires_grad();
  return autograd::record("mul", {a, b}, out, [a, b, ga, gb](const TensorList& g) {
    if (broadcast_bf16(g[0], a.shape(), b.shape()))  // see [Note: bf16 broadcast gradients]
      return TensorList{ga ? cast(sum_to(mul(to_f32(g[0]), to_f32(b)), a.shape()), DType::BF16) : Tensor(),
                        gb ? cast(sum_to(mul(to_f32(g[0]), to_f32(a)), b.shape()), DType::BF16) : Tensor()};
    return TensorList{ga ? sum_to(mul(g[0], b), a.shape()) : Tensor(), gb ? sum_to(mul(g[0], a), b.shape()) : Tensor()};
  }, {ga ? b : Tensor(), gb ? a : Tensor()});
}

Tensor div(const Tensor& a, const Tensor& b) {
  if (bf16_on_cpu("div", {&a, &b})) return to_bf16(div(to_f32(a), to_f32(b)));
  Tensor out = binary_forward(BinaryOp::Div, "div", a, b);
  // d(a/b)/da = 1/b, d(a/b)/db = -a/b^2 = -out/b
  bool ga = a.requires_grad(), gb = b.requires_grad();
  return autograd::record("div", {a, b}, out, [a, b, o = out.detach(), ga, gb](const TensorList& g) {
    // (bf16 reaches here on CUDA only: the CPU divides bf16 through the f32 detour above.)
    if (g[0].device().is_cuda() && broadcast_bf16(g[0], a.shape(), b.shape()))  // [Note: bf16 broadcast gradients]
      return TensorList{ga ? cast(sum_to(div(to_f32(g[0]), to_f32(b)), a.shape()), DType::BF16) : Tensor(),
                        gb ? cast(sum_to(cuda_div_grad_b(to_f32(g[0]), to_f32(a), to_f32(b)), b.shape()), DType::BF16)
                           : Tensor()};
    if (g[0].device().is_cuda())  // the b-gradient in one kernel (one bf16 rounding)
      return TensorList{ga ? sum_to(div(g[0], b), a.shape()) : Tensor(),
                        gb ? sum_to(cuda_div_grad_b(g[0], a, b), b.shape()) : Tensor()};
    Tensor g_over_b = div(g[0], b);
    return TensorList{ga ? sum_to(g_over_b, a.shape()) : Tensor(),
                      gb ? sum_to(neg(mul(g_over_b, o)), b.shape()) : Tensor()};
  }, {b, gb ? a : Tensor(), gb ? out : Tensor()});
}

Tensor add(const Tensor& a, double s) {
  if (bf16_on_cpu("add", {&a})) return to_bf16(add(to_f32(a), s));
  Tensor out = unary_forward(UnaryOp::AddScalar, "add", a, s);
  return autograd::record("add_scalar", {a}, out, [](const TensorList& g) { return TensorList{g[0]}; });
}

Tensor mul(const Tensor& a, double s) {
  if (bf16_on_cpu("mul", {&a})) return to_bf16(mul(to_f32(a), s));
  Tensor out = unary_forward(UnaryOp::MulScalar, "mul", a, s);
  return autograd::record("mul_scalar", {a}, out, [s](const TensorList& g) { return TensorList{mul(g[0], s)}; });
}

Tensor rsub(double s, const Tensor& a) {
  if (bf16_on_cpu("rsub", {&a})) return to_bf16(rsub(s, to_f32(a)));
  Tensor out = unary_forward(UnaryOp::RSub, "rsub", a, s);
  return autograd::record("rsub", {a}, out, [](const TensorList& g) { return TensorList{neg(g[0])}; });
}

Tensor rdiv(double s, const Tensor& a) {
  if (bf16_on_cpu("rdiv", {&a})) return to_bf16(rdiv(s, to_f32(a)));
  Tensor out = unary_forward(UnaryOp::RDiv, "rdiv", a, s);
  if (a.device().is_cuda()) return record_cuda_unary("rdiv", UnaryOp::RDiv, a, out, s);
  // d(s/a)/da = -s/a^2 = -out/a
  return autograd::record(
      "rdiv", {a}, out, [a, o = out.detach()](const TensorList& g) { return TensorList{neg(div(mul(g[0], o), a))}; },
      {a, out});
}

Tensor neg(const Tensor& a) {
  if (bf16_on_cpu("neg", {&a})) return to_bf16(neg(to_f32(a)));
  Tensor out = unary_forward(UnaryOp::Neg, "neg", a);
  return autograd::record("neg", {a}, out, [](const TensorList& g) { return TensorList{neg(g[0])}; });
}

Tensor exp(const Tensor& a) {
  if (bf16_on_cpu("exp", {&a})) return to_bf16(exp(to_f32(a)));
  Tensor out = unary_forward(UnaryOp::Exp, "exp", a);
  if (a.device().is_cuda()) return record_cuda_unary("exp", UnaryOp::Exp, a, out);
  // d exp(a) = exp(a)
  return autograd::record(
      "exp", {a}, out, [o = out.detach()](const TensorList& g) { return TensorList{mul(g[0], o)}; }, {out});
}

Tensor log(const Tensor& a) {
  if (bf16_on_cpu("log", {&a})) return to_bf16(log(to_f32(a)));
  Tensor out = unary_forward(UnaryOp::Log, "log", a);
  if (a.device().is_cuda()) return record_cuda_unary("log", UnaryOp::Log, a, out);
  // d log(a) = 1/a
  return autograd::record("log", {a}, out, [a](const TensorList& g) { return TensorList{div(g[0], a)}; }, {a});
}

Tensor sqrt(const Tensor& a) {
  if (bf16_on_cpu("sqrt", {&a})) return to_bf16(sqrt(to_f32(a)));
  Tensor out = unary_forward(UnaryOp::Sqrt, "sqrt", a);
  if (a.device().is_cuda()) return record_cuda_unary("sqrt", UnaryOp::Sqrt, a, out);
  // d sqrt(a) = 1 / (2 sqrt(a))
  return autograd::record(
      "sqrt", {a}, out, [o = out.detach()](const TensorList& g) { return TensorList{div(g[0], mul(o, 2.0))}; }, {out});
}

Tensor tanh(const Tensor& a) {
  if (bf16_on_cpu("tanh", {&a})) return to_bf16(tanh(to_f32(a)));
  Tensor out = unary_forward(UnaryOp::Tanh, "tanh", a);
  if (a.device().is_cuda()) return record_cuda_unary("tanh", UnaryOp::Tanh, a, out);
  // d tanh(a) = 1 - tanh(a)^2
  return autograd::record(
      "tanh", {a}, out, [o = out.detach()](const TensorList& g) { return TensorList{mul(g[0], rsub(1.0, square(o)))}; },
      {out});
}

Tensor square(const Tensor& a) {
  if (bf16_on_cpu("square", {&a})) return to_bf16(square(to_f32(a)));
  Tensor out = unary_forward(UnaryOp::Square, "square", a);
  if (a.device().is_cuda()) return record_cuda_unary("square", UnaryOp::Square, a, out);
  // d a^2 = 2a
  return autograd::record(
      "square", {a}, out, [a](const TensorList& g) { return TensorList{mul(mul(g[0], a), 2.0)}; }, {a});
}

namespace {
// Records a unary op whose backward is one kernel on either device (g * f'(a)).
Tensor record_kernel_unary(const char* name, UnaryOp op, const Tensor& a, const Tensor& out) {
  if (a.device().is_cuda()) return record_cuda_unary(name, op, a, out);
  return autograd::record(name, {a}, out, [op, a, name](const TensorList& g) {
    Tensor gc = g[0].is_contiguous() ? g[0] : g[0].contiguous_copy();
    Tensor ac = a.is_contiguous() ? a : a.contiguous_copy();
    Tensor dx = Tensor::empty(a.shape(), a.dtype(), a.device());
    ZDL_DISPATCH_FLOAT(a.dtype(), name, [&](auto tag) {
      using T = decltype(tag);
      kernels::cpu::unary_backward<T>(op, a.numel(), gc.data<T>(), ac.data<T>(), dx.data<T>());
    });
    return TensorList{dx};
  }, {a});
}

Tensor kernel_unary(const char* name, UnaryOp op, const Tensor& a) {
  Tensor out = unary_forward(op, name, a);
  return record_kernel_unary(name, op, a, out);
}

// maximum / minimum: the winner takes the gradient (half each on a tie), reduced to each
// input's shape.
Tensor extremum(const char* name, BinaryOp op, BinaryOp grad_op, const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(op, name, a, b);
  return autograd::record(name, {a, b}, out, [a, b, grad_op](const TensorList& g) {
    NoGradGuard ng;
    Tensor wa = binary_forward(grad_op, "maximum/minimum backward", a, b);
    Tensor wb = binary_forward(grad_op, "maximum/minimum backward", b, a);
    return TensorList{sum_to(mul(g[0], wa), a.shape()), sum_to(mul(g[0], wb), b.shape())};
  }, {a, b});
}

// cond ? a : b over the broadcast shape of all three (no graph).
Tensor select_forward(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_float_args("where", {&cond, &a, &b});
  const Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape()), b.shape());
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  if (out.numel() == 0) return out;
  StridedRows<4> it;
  it.shape = shape;
  it.strides = {out.strides(), broadcast_strides(cond, shape), broadcast_strides(a, shape), broadcast_strides(b, shape)};
  it = coalesce(it);
#ifdef ZDL_WITH_CUDA
  if (on_cuda("where", a)) {
    kernels::cuda::select(a.dtype(), it, out.raw_data(), cond.raw_data(), a.raw_data(), b.raw_data());
    return out;
  }
#endif
  check_cpu("where", a);
  ZDL_DISPATCH_FLOAT(a.dtype(), "where", [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::select<T>(it, out.data<T>(), cond.data<T>(), a.data<T>(), b.data<T>());
  });
  return out;
}
}  // namespace

Tensor relu(const Tensor& a) {
  if (bf16_on_cpu("relu", {&a})) return to_bf16(relu(to_f32(a)));
  return kernel_unary("relu", UnaryOp::Relu, a);
}

Tensor sigmoid(const Tensor& a) {
  if (bf16_on_cpu("sigmoid", {&a})) return to_bf16(sigmoid(to_f32(a)));
  return kernel_unary("sigmoid", UnaryOp::Sigmoid, a);
}

Tensor silu(const Tensor& a) {
  if (bf16_on_cpu("silu", {&a})) return to_bf16(silu(to_f32(a)));
  return kernel_unary("silu", UnaryOp::Silu, a);
}

Tensor abs(const Tensor& a) {
  if (bf16_on_cpu("abs", {&a})) return to_bf16(abs(to_f32(a)));
  return kernel_unary("abs", UnaryOp::Abs, a);
}

Tensor maximum(const Tensor& a, const Tensor& b) {
  if (bf16_on_cpu("maximum", {&a, &b})) return to_bf16(maximum(to_f32(a), to_f32(b)));
  return extremum("maximum", BinaryOp::Max, BinaryOp::MaxGrad, a, b);
}

Tensor minimum(const Tensor& a, const Tensor& b) {
  if (bf16_on_cpu("minimum", {&a, &b})) return to_bf16(minimum(to_f32(a), to_f32(b)));
  return extremum("minimum", BinaryOp::Min, BinaryOp::MinGrad, a, b);
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_defined(cond, "where", "cond");
  check_float_args("where", {&a, &b});
  Tensor c = cond.dtype() == a.dtype() ? cond.detach() : cast(cond.detach(), a.dtype());
  if (bf16_on_cpu("where", {&a, &b})) return to_bf16(where(to_f32(c), to_f32(a), to_f32(b)));
  Tensor out = select_forward(c, a, b);
  return autograd::record("where", {a, b}, out, [c, a, b](const TensorList& g) {
    NoGradGuard ng;
    Tensor zero = Tensor::zeros({}, g[0].dtype(), g[0].device());
    return TensorList{sum_to(select_forward(c, g[0], zero), a.shape()), sum_to(select_forward(c, zero, g[0]), b.shape())};
  }, {c});
}

Tensor argmax(const Tensor& a, int64_t dim) {
  check_float_args("argmax", {&a});
  ZDL_CHECK(a.dim() >= 1, "argmax: needs at least one dimension, got shape=", shape_str(a.shape()));
  const int64_t d = dim < 0 ? dim + a.dim() : dim;
  ZDL_CHECK(d >= 0 && d < a.dim(), "argmax: dim ", dim, " out of range for shape=", shape_str(a.shape()));
  ZDL_CHECK(a.size(d) > 0, "argmax: dimension ", dim, " is empty (shape=", shape_str(a.shape()), ")");
  NoGradGuard ng;
  Tensor x = contiguous(d == a.dim() - 1 ? a : transpose(a, d, a.dim() - 1));
  if (x.dtype() == DType::BF16 && x.device().is_cpu()) x = cast(x, DType::F32);
  Shape out_shape = x.shape();
  const int64_t n = out_shape.back();
  out_shape.pop_back();
  Tensor out = Tensor::empty(out_shape, DType::I64, a.device());
  const int64_t rows = out.numel();
#ifdef ZDL_WITH_CUDA
  if (on_cuda("argmax", x)) {
    kernels::cuda::argmax_rows(x.dtype(), rows, n, x.raw_data(), out.data<int64_t>());
    return out;
  }
#endif
  check_cpu("argmax", x);
  ZDL_DISPATCH_FLOAT(x.dtype(), "argmax", [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::argmax_rows<T>(rows, n, x.data<T>(), out.data<int64_t>());
  });
  return out;
}

Tensor cast(const Tensor& a, DType dtype) {
  check_defined(a, "cast", "a");
  Tensor out = Tensor::empty(a.shape(), dtype, a.device());
#ifdef ZDL_WITH_CUDA
  if (a.device().is_cuda() && a.is_contiguous() && a.dtype() != dtype &&
      (a.dtype() == DType::BF16 || dtype == DType::BF16) && (a.dtype() == DType::F32 || dtype == DType::F32))
    kernels::cuda::cast(a.dtype(), dtype, a.numel(), a.raw_data(), out.raw_data());
  else
#endif
    out.copy_(a);
  if (!is_floating(dtype)) return out;
  return autograd::record("cast", {a}, out, [from = a.dtype()](const TensorList& g) {
    return TensorList{cast(g[0], from)};
  });
}

void add_(const Tensor& dst, const Tensor& src) {
  check_float_args("add_", {&dst, &src});
  dst.check_writable_in_place("add_");  // it added several times into a repeated element
#ifdef ZDL_WITH_CUDA
  if (on_cuda("add_", dst)) {
    Shape bs = broadcast_shapes(dst.shape(), src.shape());
    ZDL_CHECK(bs == dst.shape(), "add_: source shape=", shape_str(src.shape()),
              " does not broadcast to destination shape=", shape_str(dst.shape()));
    if (dst.numel() == 0) return;
    dst.storage()->bump_version();  // [Note: version counter]
    StridedRows<2> it;
    it.shape = dst.shape();
    it.strides = {dst.strides(), broadcast_strides(src, dst.shape())};
    // Added in f32, rounded once on store (bf16), as the CPU twin.
    return kernels::cuda::accumulate(dst.dtype(), coalesce(it), dst.raw_data(), src.raw_data());
  }
#endif
  check_cpu("add_", dst);
  Shape bs = broadcast_shapes(dst.shape(), src.shape());
  ZDL_CHECK(bs == dst.shape(), "add_: source shape=", shape_str(src.shape()), " does not broadcast to destination shape=",
            shape_str(dst.shape()));
  if (dst.numel() == 0) return;
  dst.storage()->bump_version();  // [Note: version counter]
  StridedRows<2> it;
  it.shape = dst.shape();
  it.strides = {dst.strides(), broadcast_strides(src, dst.shape())};
  it = coalesce(it);
  // bf16 (gradients accumulated into bf16 flat buffers): added in f32, rounded once on store.
  if (dst.dtype() == DType::BF16)
    return kernels::cpu::accumulate<BFloat16>(it, dst.data<BFloat16>(), src.data<BFloat16>());
  ZDL_DISPATCH_FLOAT(dst.dtype(), "add_", [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::accumulate<T>(it, dst.data<T>(), src.data<T>());
  });
}

void scale_(const Tensor& dst, double s) {
  check_float_args("scale_", {&dst});
  if (dst.numel() > 0) dst.storage()->bump_version();  // [Note: version counter]
#ifdef ZDL_WITH_CUDA
  if (on_cuda("scale_", dst)) {
    ZDL_CHECK(dst.is_contiguous(), "scale_: needs a contiguous tensor, got shape=", shape_str(dst.shape()));
    return kernels::cuda::scale(dst.dtype(), dst.numel(), dst.raw_data(), s);
  }
#endif
  check_cpu("scale_", dst);
  ZDL_CHECK(dst.is_contiguous(), "scale_: needs a contiguous tensor, got shape=", shape_str(dst.shape()));
  if (dst.dtype() == DType::BF16) return kernels::cpu::scale<BFloat16>(dst.numel(), dst.data<BFloat16>(), s);
  ZDL_DISPATCH_FLOAT(dst.dtype(), "scale_", [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::scale<T>(dst.numel(), dst.data<T>(), s);
  });
}

}  // namespace zdl

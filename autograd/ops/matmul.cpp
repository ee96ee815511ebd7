// matmul and linear, each forward next to its backward, on the gemm kernels of
// kernels/cpu/matmul.h.
//
// Operands are handed to the kernels as stacks of matrices (`Mats`): a pointer, a leading
// dimension, a batch stride and a transpose flag. A transposed view (w.t(), k.transpose(-1,-2))
// maps onto the flag, so it is read in place; only layouts the flag cannot express
// (neither rows nor columns unit-stride, or batch dims that do not collapse to one stride)
// are copied. Backward multiplies by transposes the same way, with no copies:
//   C = A B   =>   dA = dC B^T,   dB = A^T dC.
// When b is 2-D (shared by every batch), a's leading dims are folded into its rows, so the
// forward and both gradients are single large GEMMs ([B*M, K] @ [K, N]); dB = A^T dC then sums
// over the batch inside the GEMM's K loop instead of through a separate reduction.
//
// CPU bf16: natively where kernels::cpu::gemm_bf16_available() (zerodl's kernel, or oneDNN's bf16
// GEMM: f32 sums, one rounding, as on CUDA); elsewhere through the f32 detour of bf16_compute.h.
//
// CUDA (f32, bf16): the same Mats go to the cuBLASLt twins (kernels/cuda/matmul.h) with
// device pointers; bf16 runs natively (bf16 in/out, f32 accumulation, one rounding), and
// linear's bias is fused into the forward GEMM's epilogue. gelu_mlp, the transformer's MLP, puts
// the bias + GELU and its backward into the GEMMs' epilogues there too.
#include <algorithm>
#include <utility>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/ops/bf16_compute.h"
#include "autograd/ops/op_checks.h"
#include "kernels/cpu/matmul.h"
#ifdef ZDL_WITH_CUDA
#include "kernels/cuda/gelu.h"
#include "kernels/cuda/matmul.h"
#endif

namespace zdl {

using autograd::TensorList;
using namespace ops_detail;

namespace {

// `batch` matrices of [rows, cols] as the gemm kernels read them: matrix i starts at element
// i * batch_stride of t's view and is row-major with leading dimension ld, or, when trans,
// stored as its row-major transpose. Holds the tensor (not a pointer): the bytes are read
// from its Storage when the kernel runs (docs/design.md, mechanism 1).
struct Mats {
  Tensor t;
  int64_t batch = 1, rows = 0, cols = 0;
  bool trans = false;
  int64_t ld = 1, batch_stride = 0;

  // The same bytes read as the stack of transposes (no copy).
  Mats transposed() const {
    Mats m = *this;
    std::swap(m.rows, m.cols);
    m.trans = !trans;
    return m;
  }
};

// Collapses dims [lo, hi) of t into one (size, stride) when the layout allows (size-1 dims
// are free); false when they do not form one uniform stride.
bool collapse_dims(const Tensor& t, int64_t lo, int64_t hi, int64_t& size, int64_t& stride) {
  size = 1;
  stride = 0;
  bool first = true;
  for (int64_t d = hi - 1; d >= lo; --d) {
    int64_t n = t.shape()[d];
    if (n == 1) continue;
    if (first) {
      stride = t.strides()[d];
      first = false;
    } else if (t.strides()[d] != stride * size) {
      return false;
    }
    size *= n;
  }
  return true;
}

// Reads t [..., R, C] as matrices. fold: every leading dim joins the rows (one matrix of
// [prod(...)*R, C]); otherwise the leading dims are the batch. Copies to a contiguous tensor
// only when the layout cannot be expressed.
Mats as_mats(const Tensor& t, bool fold) {
  const int64_t nd = t.dim();
  Mats m;
  m.t = t;
  m.cols = t.shape()[nd - 1];
  bool ok;
  int64_t rs;  // row stride
  if (fold) {
    ok = collapse_dims(t, 0, nd - 1, m.rows, rs);
  } else {
    ok = collapse_dims(t, 0, nd - 2, m.batch, m.batch_stride);
    m.rows = t.shape()[nd - 2];
    rs = t.strides()[nd - 2];
  }
  const int64_t cs = t.strides()[nd - 1];
  if (t.numel() == 0) {  // nothing is read; any valid description will do
    m.trans = false;
    m.ld = std::max<int64_t>(m.cols, 1);
    m.batch_stride = m.rows * m.cols;
    return m;
  }
  if (ok && (m.cols == 1 || cs == 1) && (m.rows == 1 || rs >= m.cols)) {
    m.trans = false;
    m.ld = m.rows == 1 ? m.cols : rs;
  } else if (ok && (m.rows == 1 || rs == 1) && (m.cols == 1 || cs >= m.rows)) {
    m.trans = true;
    m.ld = m.cols == 1 ? m.rows : cs;
  } else {
    return as_mats(t.contiguous_copy(), fold);
  }
  return m;
}

// out (+)= op(a) op(b), batched; out is a fresh contiguous tensor of batch * M * N elements.
void gemm_into(const Tensor& out, const Mats& a, const Mats& b, bool accumulate, const char* op) {
  ZDL_CHECK(a.cols == b.rows && a.batch == b.batch && out.numel() == a.batch * a.rows * b.cols, op,
            ": internal shape error [", a.batch, ",", a.rows, ",", a.cols, "] @ [", b.batch, ",", b.rows, ",", b.cols,
            "] -> ", shape_str(out.shape()));
  if (out.numel() == 0) return;
  if (a.cols == 0) {  // empty inner dimension: the product is zero
    if (!accumulate) out.zero_();
    return;
  }
  const int64_t M = a.rows, N = b.cols;
#ifdef ZDL_WITH_CUDA
  if (out.device().is_cuda()) {
    kernels::cuda::gemm_batched(out.dtype(), a.batch, M, N, a.cols, a.trans, a.t.raw_data(), a.ld, a.batch_stride,
                                b.trans, b.t.raw_data(), b.ld, b.batch_stride, out.raw_data(), N, M * N, accumulate);
    return;
  }
#endif
  if (out.dtype() == DType::BF16) {
    // Native bf16 (callers checked gemm_bf16_available()): products summed in f32 on top of
    // out's value when accumulating (linear's bias), rounded to bf16 once.
    kernels::cpu::gemm_bf16_batched(a.batch, M, N, a.cols, a.trans, a.t.data<BFloat16>(), a.ld, a.batch_stride, b.trans,
                                    b.t.data<BFloat16>(), b.ld, b.batch_stride, out.data<BFloat16>(), N, M * N,
                                    accumulate);
    return;
  }
  ZDL_DISPATCH_FLOAT(out.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::gemm_batched<T>(a.batch, M, N, a.cols, a.trans, a.t.data<T>(), a.ld, a.batch_stride, b.trans,
                                  b.t.data<T>(), b.ld, b.batch_stride, out.data<T>(), N, M * N, accumulate);
  });
}

// linear's bias gradient: dy summed over every row.
Tensor bias_grad(const Tensor& dy) {
  std::vector<int64_t> rows(static_cast<size_t>(dy.dim() - 1));
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(i);
  return rows.empty() ? dy.contiguous_copy() : sum(dy, rows);
}

Tensor product(const Shape& shape, const Mats& a, const Mats& b, const char* op) {
  Tensor out = Tensor::empty(shape, a.t.dtype(), a.t.device());
  gemm_into(out, a, b, /*accumulate=*/false, op);
  return out;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (bf16_on_cpu("matmul", {&a, &b}) && !kernels::cpu::gemm_bf16_available())
    return to_bf16(matmul(to_f32(a), to_f32(b)));
  if (!on_cuda("matmul", a)) check_cpu("matmul", a);
  ZDL_CHECK(a.dim() >= 2 && b.dim() >= 2, "matmul: expected a [..., M, K] and b [..., K, N] with at least 2 dims, got a.shape=",
            shape_str(a.shape()), " b.shape=", shape_str(b.shape()));
  ZDL_CHECK(a.size(-1) == b.size(-2), "matmul: inner dimensions differ: a.shape=", shape_str(a.shape()), " has K=",
            a.size(-1), " but b.shape=", shape_str(b.shape()), " has K=", b.size(-2), " (a [..., M, K] @ b [..., K, N])");
  // b 2-D: one matrix shared by every batch, so a's leading dims fold into its rows.
  const bool fold = b.dim() == 2;
  ZDL_CHECK(fold || (b.dim() == a.dim() && std::equal(a.shape().begin(), a.shape().end() - 2, b.shape().begin())),
            "matmul: b must be 2-D or have the same leading dims as a, got a.shape=", shape_str(a.shape()),
            " b.shape=", shape_str(b.shape()));

  Mats A = as_mats(a.detach(), fold), B = as_mats(b.detach(), fold);
  Shape out_shape = a.shape();
  out_shape.back() = b.size(-1);
  Tensor out = product(out_shape, A, B, "matmul");

  // dA = dC B^T, dB = A^T dC (with fold, A^T dC sums over the batch folded into K).
  const bool ga = a.requires_grad(), gb = b.requires_grad();
  return autograd::record("matmul", {a, b}, out, [A, B, fold, ga, gb, sa = a.shape(), sb = b.shape()](const TensorList& g) {
    Mats G = as_mats(g[0], fold);
    return TensorList{ga ? product(sa, G, B.transposed(), "matmul backward") : Tensor(),
                      gb ? product(sb, A.transposed(), G, "matmul backward") : Tensor()};
  }, {ga ? B.t : Tensor(), gb ? A.t : Tensor()});
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const bool has_bias = bias.defined();
  const bool bf16 = has_bias ? bf16_on_cpu("linear", {&x, &weight, &bias}) : bf16_on_cpu("linear", {&x, &weight});
  if (bf16 && !kernels::cpu::gemm_bf16_available()) return to_bf16(linear(to_f32(x), to_f32(weight), to_f32(bias)));
  const bool cuda = on_cuda("linear", x);
  if (!cuda) check_cpu("linear", x);
  ZDL_CHECK(weight.dim() == 2, "linear: weight must be 2-D [out, in], got weight.shape=", shape_str(weight.shape()));
  ZDL_CHECK(x.dim() >= 1, "linear: x must have at least 1 dim [..., in], got x.shape=", shape_str(x.shape()));
  const int64_t in = weight.size(1), out_features = weight.size(0);
  ZDL_CHECK(x.size(-1) == in, "linear: in_features ", in, " != x.size(-1) ", x.size(-1), ", x.shape=",
            shape_str(x.shape()), " weight.shape=", shape_str(weight.shape()));
  if (has_bias)
    ZDL_CHECK(bias.dim() == 1 && bias.size(0) == out_features, "linear: bias must be [out]=[", out_features,
              "], got bias.shape=", shape_str(bias.shape()), " (weight.shape=", shape_str(weight.shape()), ")");

  // y[BT, out] = x[BT, in] @ W^T  (+ bias in every row: written first, then the GEMM adds onto it).
  Mats X = as_mats(x.detach(), /*fold=*/true), W = as_mats(weight.detach(), /*fold=*/false);
  Shape out_shape = x.shape();
  out_shape.back() = out_features;
  Tensor y = Tensor::empty(out_shape, x.dtype(), x.device());
  const bool fused_bias = cuda && has_bias;  // CUDA: y = X W^T + bias in one cuBLASLt call (epilogue)
#ifdef ZDL_WITH_CUDA
  if (fused_bias && y.numel() > 0) {
    Tensor bc = bias.is_contiguous() ? bias : bias.contiguous_copy();
    const Mats Wt = W.transposed();
    kernels::cuda::gemm_bias(y.dtype(), X.rows, out_features, in, X.trans, X.t.raw_data(), X.ld, Wt.trans,
                             Wt.t.raw_data(), Wt.ld, bc.raw_data(), y.raw_data(), out_features);
  }
#endif
  if (has_bias && !fused_bias && y.numel() > 0) {
    Tensor bc = bias.is_contiguous() ? bias : bias.contiguous_copy();
    ZDL_DISPATCH_FLOAT_OR_BF16(x.dtype(), "linear", [&](auto tag) {
      using T = decltype(tag);
      kernels::cpu::fill_rows<T>(X.rows, out_features, bc.data<T>(), y.data<T>());
    });
  }
  if (!fused_bias) gemm_into(y, X, W.transposed(), /*accumulate=*/has_bias, "linear");

  // dx = dy W, dW = dy^T x (sums over the folded batch), dbias = column sums of dy.
  const bool gx = x.requires_grad(), gw = weight.requires_grad(), gbias = has_bias && bias.requires_grad();
  return autograd::record(
      "linear", {x, weight, bias}, y,
      [X, W, gx, gw, gbias, sx = x.shape(), sw = weight.shape()](const TensorList& g) {
        Mats G = as_mats(g[0], /*fold=*/true);
        Tensor db = gbias ? bias_grad(g[0]) : Tensor();
        return TensorList{gx ? product(sx, G, W, "linear backward") : Tensor(),
                          gw ? product(sw, G.transposed(), X, "linear backward") : Tensor(), db};
      },
      {gx ? W.t : Tensor(), gw ? X.t : Tensor()});
}

#ifdef ZDL_WITH_CUDA
namespace {

// gelu_mlp's arguments that the fused path takes: bf16 on one GPU, both biases, shapes that
// chain. Anything else goes to the three ops (which name what is wrong).
bool fusable_mlp(const Tensor& x, const Tensor& w_fc, const Tensor& b_fc, const Tensor& w_proj, const Tensor& b_proj) {
  for (const Tensor* t : {&x, &w_fc, &b_fc, &w_proj, &b_proj})
    if (!t->defined() || t->device() != x.device() || t->dtype() != DType::BF16) return false;
  return x.device().is_cuda() && x.dim() >= 1 && x.numel() > 0 && w_fc.dim() == 2 && w_proj.dim() == 2 &&
         b_fc.dim() == 1 && b_proj.dim() == 1 && x.size(-1) == w_fc.size(1) && b_fc.size(0) == w_fc.size(0) &&
         w_proj.size(1) == w_fc.size(0) && b_proj.size(0) == w_proj.size(0) && w_fc.size(0) > 0 && w_proj.size(0) > 0;
}

}  // namespace
#endif

Tensor gelu_mlp(const Tensor& x, const Tensor& w_fc, const Tensor& b_fc, const Tensor& w_proj, const Tensor& b_proj) {
#ifdef ZDL_WITH_CUDA
  if (fusable_mlp(x, w_fc, b_fc, w_proj, b_proj)) {
    namespace kcu = kernels::cuda;
    const DType dt = x.dtype();
    const Device dev = x.device();
    const int64_t C = w_fc.size(1), H = w_fc.size(0), C2 = w_proj.size(0);
    const Mats X = as_mats(x.detach(), /*fold=*/true), W1 = as_mats(w_fc.detach(), false),
               W2 = as_mats(w_proj.detach(), false);
    const Tensor b1 = b_fc.is_contiguous() ? b_fc : b_fc.contiguous_copy(),
                 b2 = b_proj.is_contiguous() ? b_proj : b_proj.contiguous_copy();  // read in the forward only
    Shape hidden = x.shape();
    hidden.back() = H;
    Tensor pre = Tensor::empty(hidden, dt, dev), h = Tensor::empty(hidden, dt, dev);  // gelu's input and output
    const Mats W1t = W1.transposed(), W2t = W2.transposed();
    if (!kcu::gemm_bias_gelu(dt, X.rows, H, C, X.trans, X.t.raw_data(), X.ld, W1t.trans, W1t.t.raw_data(), W1t.ld,
                             b1.raw_data(), h.raw_data(), H, pre.raw_data(), H)) {
      kcu::gemm_bias(dt, X.rows, H, C, X.trans, X.t.raw_data(), X.ld, W1t.trans, W1t.t.raw_data(), W1t.ld,
                     b1.raw_data(), pre.raw_data(), H);
      kcu::gelu_forward(dt, pre.numel(), pre.raw_data(), h.raw_data());
    }
    Shape out_shape = x.shape();
    out_shape.back() = C2;
    Tensor y = Tensor::empty(out_shape, dt, dev);
    kcu::gemm_bias(dt, X.rows, C2, H, false, h.raw_data(), H, W2t.trans, W2t.t.raw_data(), W2t.ld, b2.raw_data(),
                   y.raw_data(), C2);
    const bool gx = x.requires_grad(), g1 = w_fc.requires_grad(), gb1 = b_fc.requires_grad(),
               g2 = w_proj.requires_grad(), gb2 = b_proj.requires_grad();
    // dh = dy W2 and dpre = gelu'(pre) dh (one GEMM with its epilogue, which also sums db1), then
    // linear's gradients on each side.
    return autograd::record(
        "gelu_mlp", {x, w_fc, b_fc, w_proj, b_proj}, y,
        [X, W1, W2, pre, h, gx, g1, gb1, g2, gb2, sx = x.shape(), s1 = w_fc.shape(), s2 = w_proj.shape()](
            const TensorList& g) {
          const DType dt = pre.dtype();
          const Device dev = pre.device();
          const int64_t H = pre.size(-1), C2 = W2.rows;
          const Mats G = as_mats(g[0], /*fold=*/true), Hm = as_mats(h, true);
          Tensor dw2 = g2 ? product(s2, G.transposed(), Hm, "gelu_mlp backward") : Tensor();
          Tensor db2 = gb2 ? bias_grad(g[0]) : Tensor();
          Tensor dpre = Tensor::empty(pre.shape(), dt, dev);
          Tensor db1 = Tensor::empty({H}, dt, dev);
          if (!kcu::gemm_dgelu_bgrad(dt, G.rows, H, C2, G.trans, G.t.raw_data(), G.ld, W2.trans, W2.t.raw_data(),
                                     W2.ld, pre.raw_data(), H, dpre.raw_data(), H, db1.raw_data())) {
            Tensor dh = product(pre.shape(), G, W2, "gelu_mlp backward");
            kcu::gelu_backward(dt, pre.numel(), pre.raw_data(), dh.raw_data(), dpre.raw_data());
            if (gb1) db1 = bias_grad(dpre);
          }
          const Mats D = as_mats(dpre, true);
          return TensorList{gx ? product(sx, D, W1, "gelu_mlp backward") : Tensor(),
                            g1 ? product(s1, D.transposed(), X, "gelu_mlp backward") : Tensor(), gb1 ? db1 : Tensor(),
                            dw2, db2};
        },
        {X.t, W1.t, W2.t, pre, h});
  }
#endif
  return linear(gelu(linear(x, w_fc, b_fc)), w_proj, b_proj);
}

}  // namespace zdl

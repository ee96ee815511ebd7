// Neural-network ops: gelu, layer_norm, softmax, embedding, cross_entropy, dropout. Each
// forward sits next to its backward and calls the kernels in kernels/cpu/<op>.h, which work
// on contiguous buffers: non-contiguous inputs are copied once here, incoming gradients too.
//
// Choices:
// - Backward closures run dedicated backward kernels (not compositions of differentiable
//   ops), so these ops are differentiable once, not twice.
// - Saved state is the minimum the backward kernel needs: gelu and layer_norm keep x (plus
//   per-row mean/rstd), softmax keeps its output (detached: capturing `out` itself would make
//   a cycle out -> node -> out), cross_entropy keeps per-row max and logsumexp instead of the
//   [N, V] probabilities, dropout keeps nothing and regenerates its Philox mask.
// - Parameters (layer_norm weight, embedding weight) are saved as detached handles on the
//   same Storage, so a ZeRO-3 re-gathered parameter is what backward reads (docs/design.md, mechanism 1).
// - CUDA tensors (build with ZDL_CUDA) go to the twins in kernels/cuda/ after the same argument
//   checks: f32 and bf16 natively (bf16 loaded to f32 inside the kernels, no f32 copies),
//   statistics (layer_norm mean/rstd, cross_entropy max/lse) saved in f32, the cross_entropy
//   loss f32. Ids and targets are checked on the device before any kernel reads through them,
//   so bad ones give the CPU's error. See [Note: CUDA ops] below.
#include <cmath>

#include "autograd/engine.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/ops/bf16_compute.h"
#include "autograd/ops/op_checks.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/layer_norm.h"
#include "kernels/cpu/softmax.h"
#ifdef ZDL_WITH_CUDA
#include "core/deferred_read.h"
#include "core/memory.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/dropout.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/gelu.h"
#include "kernels/cuda/layer_norm.h"
#include "kernels/cuda/softmax.h"
#endif

namespace zdl {

using autograd::TensorList;
using namespace ops_detail;
namespace kc = kernels::cpu;

namespace {

// The tensor itself when contiguous, else a contiguous copy (kernels read dense buffers).
Tensor dense(const Tensor& t) { return t.is_contiguous() ? t : t.contiguous_copy(); }

// Checks an index tensor's type (embedding ids, cross-entropy targets): defined, i32 or i64.
// Its device must be its op's floating argument's (check_same_device names both).
void check_index_dtype(const char* op, const Tensor& t, const char* arg) {
  check_defined(t, op, arg);
  ZDL_CHECK(t.dtype() == DType::I32 || t.dtype() == DType::I64, op, ": ", arg, " must be i32 or i64, got ",
            dtype_name(t.dtype()), " (", arg, " shape=", shape_str(t.shape()), ")");
}

// Calls f(I{}) with the C++ type of an index dtype (checked before by check_index_dtype).
template <class F>
void dispatch_index(DType dtype, F&& f) {
  if (dtype == DType::I32) f(int32_t{});
  else f(int64_t{});
}

// Checks that a layer_norm affine parameter is [C] and matches x's dtype and device.
void check_ln_param(const Tensor& p, const char* arg, const Tensor& x) {
  if (!p.defined()) return;
  check_same_device(x, p, "layer_norm");
  check_same_dtype(x, p, "layer_norm");
  ZDL_CHECK(p.dim() == 1 && p.size(0) == x.size(-1), "layer_norm: ", arg, " shape=", shape_str(p.shape()),
            " must be [C] with C the last dim of x shape=", shape_str(x.shape()));
}

// Checks cross_entropy's logits [N, ld], targets [N] and num_classes (0: all ld columns).
void check_cross_entropy_args(const Tensor& logits, const Tensor& targets, int64_t num_classes) {
  check_index_dtype("cross_entropy", targets, "targets");
  check_same_device(logits, targets, "cross_entropy");
  ZDL_CHECK(logits.dim() == 2 && targets.dim() == 1 && logits.size(0) == targets.size(0),
            "cross_entropy: expected logits [N, V] and targets [N], got logits shape=", shape_str(logits.shape()),
            " and targets shape=", shape_str(targets.shape()));
  ZDL_CHECK(num_classes >= 0 && num_classes <= logits.size(1), "cross_entropy: num_classes=", num_classes,
            " must be in [0, ", logits.size(1), "] (the logits' columns; 0: all of them), logits shape=",
            shape_str(logits.shape()));
}

// Where a backward writes the gradient of its saved input `saved` (dense): over the saved
// buffer itself when nothing else holds it and the graph is not kept for another backward (the
// input is dead once its gradient exists: a GPT's logits are the largest activation), else new.
Tensor gradient_buffer(const Tensor& saved) {
  if (!autograd::graph_retained() && saved.storage().use_count() == 1) return saved;
  return Tensor::empty(saved.shape(), saved.dtype(), saved.device());
}

#ifdef ZDL_WITH_CUDA
// [Note: CUDA ops] The CUDA paths below mirror the CPU ops above them: the same argument checks
// and error messages, the same saved tensors (statistics in f32 rather than the input dtype),
// gradients of the input's dtype. Kernels read dense buffers: non-contiguous inputs and
// incoming gradients are made contiguous on the device first (dense()). Scratch memory is a
// Workspace-tagged tensor, freed stream-ordered when the op returns.
namespace kcu = kernels::cuda;

// The gradient arriving at a CUDA op's output: on the output's device, of its dtype, dense.
Tensor cuda_grad(const char* op, const Tensor& g, DType dtype, Device device) {
  check_defined(g, op, "gradient");
  ZDL_CHECK(g.device() == device, op, " backward: gradient on ", g.device().str(), " but the output is on ",
            device.str(), " (gradient shape=", shape_str(g.shape()), ")");
  ZDL_CHECK(g.dtype() == dtype, op, " backward: gradient dtype ", dtype_name(g.dtype()), " != output dtype ",
            dtype_name(dtype), " (gradient shape=", shape_str(g.shape()), ")");
  return dense(g);
}

// Device scratch of at least `bytes` bytes, accounted as Workspace.
Tensor cuda_workspace(size_t bytes, Device device) {
  MemoryScope scope(MemoryCategory::Workspace);
  return Tensor::empty({static_cast<int64_t>((bytes + 7) / 8)}, DType::I64, device);
}

Tensor gelu_cuda(const Tensor& x) {
  Tensor xc = dense(x);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (out.numel() == 0) return out;
  kcu::gelu_forward(x.dtype(), xc.numel(), xc.raw_data(), out.raw_data());
  return autograd::record("gelu", {x}, out, [xs = xc.detach()](const TensorList& g) {
    Tensor gc = cuda_grad("gelu", g[0], xs.dtype(), xs.device());
    Tensor dx = Tensor::empty(xs.shape(), xs.dtype(), xs.device());
    kcu::gelu_backward(xs.dtype(), xs.numel(), xs.raw_data(), gc.raw_data(), dx.raw_data());
    return TensorList{dx};
  }, {xc});
}

// Arguments checked by layer_norm (shapes, eps, weight/bias dtype and device).
Tensor layer_norm_cuda(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  const int64_t C = x.size(-1), rows = x.numel() / C;
  const Device dev = x.device();
  Tensor xc = dense(x);
  Tensor wc = weight.defined() ? dense(weight).detach() : Tensor();
  Tensor bc = bias.defined() ? dense(bias).detach() : Tensor();
  Tensor out = Tensor::empty(x.shape(), x.dtype(), dev);
  Tensor mean = Tensor::empty({rows}, DType::F32, dev);  // (rows,) f32
  Tensor rstd = Tensor::empty({rows}, DType::F32, dev);  // (rows,) f32
  if (rows > 0)
    kcu::layer_norm_forward(x.dtype(), rows, C, xc.raw_data(), wc.defined() ? wc.raw_data() : nullptr,
                            bc.defined() ? bc.raw_data() : nullptr, eps, out.raw_data(), mean.data<float>(),
                            rstd.data<float>());
  bool gx = x.requires_grad(), gw = weight.defined() && weight.requires_grad(),
       gb = bias.defined() && bias.requires_grad();
  return autograd::record(
      "layer_norm", {x, weight, bias}, out,
      [xs = xc.detach(), wc, mean, rstd, rows, C, gx, gw, gb](const TensorList& g) {
        const DType dt = xs.dtype();
        const Device dev = xs.device();
        Tensor dx = gx ? Tensor::empty(xs.shape(), dt, dev) : Tensor();
        if (rows == 0)  // no rows: zero parameter gradients
          return TensorList{dx, gw ? Tensor::zeros({C}, dt, dev) : Tensor(),
                            gb ? Tensor::zeros({C}, dt, dev) : Tensor()};
        Tensor dw = gw ? Tensor::empty({C}, dt, dev) : Tensor();
        Tensor db = gb ? Tensor::empty({C}, dt, dev) : Tensor();
        Tensor gc = cuda_grad("layer_norm", g[0], dt, dev);
        Tensor work = gw || gb ? cuda_workspace(kcu::layer_norm_backward_workspace_bytes(rows, C), dev) : Tensor();
        kcu::layer_norm_backward(dt, rows, C, xs.raw_data(), wc.defined() ? wc.raw_data() : nullptr,
                                 mean.data<float>(), rstd.data<float>(), gc.raw_data(), gx ? dx.raw_data() : nullptr,
                                 gw ? dw.raw_data() : nullptr, gb ? db.raw_data() : nullptr,
                                 work.defined() ? work.raw_data() : nullptr);
        return TensorList{dx, dw, db};
      },
      {xc, wc});
}

// Softmax over the last dim (softmax() moves other dims last first).
Tensor softmax_lastdim_cuda(const Tensor& x) {
  const int64_t C = x.size(-1), rows = C == 0 ? 0 : x.numel() / C;
  Tensor xc = dense(x);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (rows == 0) return out;
  kcu::softmax_forward(x.dtype(), rows, C, xc.raw_data(), out.raw_data());
  return autograd::record("softmax", {x}, out, [y = out.detach(), rows, C](const TensorList& g) {
    Tensor gc = cuda_grad("softmax", g[0], y.dtype(), y.device());
    Tensor dx = Tensor::empty(y.shape(), y.dtype(), y.device());
    kcu::softmax_backward(y.dtype(), rows, C, y.raw_data(), gc.raw_data(), dx.raw_data());
    return TensorList{dx};
  }, {out});
}

Tensor embedding_cuda(const Tensor& weight, const Tensor& ids) {
  check_index_dtype("embedding", ids, "ids");
  check_same_device(weight, ids, "embedding");
  ZDL_CHECK(weight.dim() == 2, "embedding: weight must be 2-D [V, C], got weight shape=", shape_str(weight.shape()),
            " (ids shape=", shape_str(ids.shape()), ")");
  const int64_t V = weight.size(0), C = weight.size(1), n = ids.numel();
  const Device dev = weight.device();
  Tensor idc = dense(ids).detach();
  Tensor wc = dense(weight);
  if (n > 0) {  // judged at the next host wait ([Note: reads the host takes later])
    Tensor work = cuda_workspace(kcu::kIndexScanWorkspaceBytes, dev);
    kcu::scan_indices(ids.dtype(), n, idc.raw_data(), V, false, 0, work.raw_data());
    defer_check(work.raw_data(), dev, kcu::kIndexScanWorkspaceBytes,
                [n, V, wshape = weight.shape(), ishape = ids.shape()](const void* bytes) -> std::string {
                  const kcu::IndexScan scan = kcu::index_scan_result(bytes, n);
                  if (scan.first_bad < 0) return {};
                  return detail::str("embedding: id ", scan.bad_value, " at flat position ", scan.first_bad,
                                     " is out of range [0, V=", V, ") (weight shape=", shape_str(wshape),
                                     ", ids shape=", shape_str(ishape), ")");
                });
  }
  Shape out_shape = ids.shape();
  out_shape.push_back(C);  // [S..., C]
  Tensor out = Tensor::empty(out_shape, weight.dtype(), dev);
  if (out.numel() > 0)
    kcu::embedding_forward(weight.dtype(), ids.dtype(), n, V, C, wc.raw_data(), idc.raw_data(), out.raw_data());
  // dweight[v] = sum over {s : ids[s] == v} of dout[s], summed in position order (deterministic)
  return autograd::record("embedding", {weight}, out, [idc, V, C, dt = weight.dtype(), dev](const TensorList& g) {
    Tensor dw = Tensor::empty({V, C}, dt, dev);
    if (dw.numel() == 0) return TensorList{dw};
    Tensor gc = cuda_grad("embedding", g[0], dt, dev);
    const int64_t n = idc.numel();
    const size_t bytes = kcu::embedding_backward_workspace_bytes(n, V);
    Tensor work = bytes ? cuda_workspace(bytes, dev) : Tensor();
    kcu::embedding_backward(dt, idc.dtype(), n, V, C, idc.raw_data(), gc.raw_data(), dw.raw_data(),
                            work.defined() ? work.raw_data() : nullptr, bytes);
    return TensorList{dw};
  }, {idc});
}

Tensor cross_entropy_cuda(const Tensor& logits, const Tensor& targets, int64_t ignore_index, int64_t num_classes) {
  check_cross_entropy_args(logits, targets, num_classes);
  const int64_t N = logits.size(0), ld = logits.size(1), V = num_classes > 0 ? num_classes : ld;
  const Device dev = logits.device();
  Tensor lc = dense(logits);
  Tensor tc = dense(targets).detach();
  // The scan's workspace keeps the count of rows the kernels divide by; the range check is
  // judged at the next host wait ([Note: reads the host takes later]).
  Tensor scan = Tensor::empty({3}, DType::I64, dev);  // kept for the backward, like row_max
  static_assert(kcu::kIndexScanWorkspaceBytes == 3 * sizeof(int64_t));
  kcu::scan_indices(targets.dtype(), N, tc.raw_data(), V, true, ignore_index, scan.raw_data());
  if (N > 0)
    defer_check(scan.raw_data(), dev, kcu::kIndexScanWorkspaceBytes,
                [N, V, ignore_index, lshape = logits.shape(), tshape = targets.shape()](const void* bytes) -> std::string {
                  const kcu::IndexScan r = kcu::index_scan_result(bytes, N);
                  if (r.first_bad < 0) return {};
                  return detail::str("cross_entropy: target ", r.bad_value, " at row ", r.first_bad,
                                     " is out of range [0, V=", V, ") and is not ignore_index=", ignore_index,
                                     " (logits shape=", shape_str(lshape), ", targets shape=", shape_str(tshape), ")");
                });
  const auto* count = static_cast<const unsigned long long*>(scan.raw_data()) + 1;
  Tensor row_max = Tensor::empty({N}, DType::F32, dev);  // (N,)
  Tensor row_lse = Tensor::empty({N}, DType::F32, dev);  // (N,) log sum exp(x - max)
  Tensor out = Tensor::empty({}, DType::F32, dev);       // the mean loss, f32 for f32 and bf16 logits
  {
    Tensor row_loss = cuda_workspace(static_cast<size_t>(N) * sizeof(float), dev);
    kcu::cross_entropy_forward(logits.dtype(), targets.dtype(), N, V, ld, lc.raw_data(), tc.raw_data(),
                               ignore_index, count, row_max.data<float>(), row_lse.data<float>(),
                               N > 0 ? static_cast<float*>(row_loss.raw_data()) : nullptr, out.data<float>());
  }
  // dloss/dx[n, v] = (softmax(x_n)_v - [v == t_n]) * dloss / count, from the saved max and lse
  return autograd::record(
      "cross_entropy", {logits}, out,
      [xs = lc.detach(), tc, row_max, row_lse, scan, ignore_index, N, V, ld](const TensorList& g) {
        if (N * ld == 0) return TensorList{Tensor::zeros({N, ld}, xs.dtype(), xs.device())};
        Tensor gl = cuda_grad("cross_entropy", g[0], DType::F32, xs.device());
        Tensor dl = gradient_buffer(xs);
        kcu::cross_entropy_backward(xs.dtype(), tc.dtype(), N, V, ld, xs.raw_data(), tc.raw_data(), ignore_index,
                                    row_max.data<float>(), row_lse.data<float>(), gl.data<float>(),
                                    static_cast<const unsigned long long*>(scan.raw_data()) + 1, dl.raw_data());
        return TensorList{dl};
      },
      {lc, tc});
}

// Arguments checked by dropout; training with p > 0.
Tensor dropout_cuda(const Tensor& x, double p, uint64_t seed, uint64_t stream, int64_t offset) {
  Tensor xc = dense(x);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (out.numel() == 0) return out;
  kcu::dropout_forward(x.dtype(), xc.numel(), xc.raw_data(), p, seed, stream, out.raw_data(), offset);
  // The same mask, regenerated from (seed, stream, i), bit-identical to the CPU's.
  const DType dt = x.dtype();
  const Device dev = x.device();
  return autograd::record("dropout", {x}, out, [p, seed, stream, offset, dt, dev](const TensorList& g) {
    Tensor gc = cuda_grad("dropout", g[0], dt, dev);
    Tensor dx = Tensor::empty(gc.shape(), dt, dev);
    kcu::dropout_backward(dt, gc.numel(), gc.raw_data(), p, seed, stream, dx.raw_data(), offset);
    return TensorList{dx};
  });
}
#endif  // ZDL_WITH_CUDA

}  // namespace

// ---- gelu ----

Tensor gelu(const Tensor& x) {
  check_float_args("gelu", {&x});
#ifdef ZDL_WITH_CUDA
  if (on_cuda("gelu", x)) return gelu_cuda(x);
#endif
  check_cpu("gelu", x);
  Tensor xc = dense(x);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (out.numel() == 0) return out;
  ZDL_DISPATCH_FLOAT_OR_BF16(x.dtype(), "gelu", [&](auto tag) {
    using T = decltype(tag);
    kc::gelu_forward<T>(xc.numel(), xc.data<T>(), out.data<T>());
  });
  // d gelu/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 * 0.044715 x^2),  t = tanh(k (x + 0.044715 x^3))
  return autograd::record("gelu", {x}, out, [xs = xc.detach()](const TensorList& g) {
    Tensor gc = dense(g[0]);
    Tensor dx = Tensor::empty(xs.shape(), xs.dtype(), xs.device());
    ZDL_DISPATCH_FLOAT_OR_BF16(xs.dtype(), "gelu backward", [&](auto tag) {
      using T = decltype(tag);
      kc::gelu_backward<T>(xs.numel(), xs.data<T>(), gc.data<T>(), dx.data<T>());
    });
    return TensorList{dx};
  }, {xc});
}

// ---- layer_norm ----

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  check_float_args("layer_norm", {&x});
  ZDL_CHECK(x.dim() >= 1 && x.size(-1) > 0, "layer_norm: x needs a non-empty last dim, got shape=",
            shape_str(x.shape()));
  ZDL_CHECK(eps >= 0.0, "layer_norm: eps must be >= 0, got ", eps);
  check_ln_param(weight, "weight", x);
  check_ln_param(bias, "bias", x);
#ifdef ZDL_WITH_CUDA
  if (on_cuda("layer_norm", x)) return layer_norm_cuda(x, weight, bias, eps);
#endif
  check_cpu("layer_norm", x);
  const int64_t C = x.size(-1), rows = x.numel() / C;
  Tensor xc = dense(x);
  Tensor wc = weight.defined() ? dense(weight).detach() : Tensor();
  Tensor bc = bias.defined() ? dense(bias).detach() : Tensor();
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  const DType stat = kc::compute_dtype(x.dtype());  // of the statistics: f32 for bf16 rows
  Tensor mean = Tensor::empty({rows}, stat, x.device());  // (rows,)
  Tensor rstd = Tensor::empty({rows}, stat, x.device());  // (rows,)
  if (rows > 0) {
    ZDL_DISPATCH_FLOAT_OR_BF16(x.dtype(), "layer_norm", [&](auto tag) {
      using T = decltype(tag);
      kc::layer_norm_forward<T>(rows, C, xc.data<T>(), wc.defined() ? wc.data<T>() : nullptr,
                                bc.defined() ? bc.data<T>() : nullptr, eps, out.data<T>(),
                                mean.data<kc::compute_t<T>>(), rstd.data<kc::compute_t<T>>());
    });
  }
  // xhat = (x - mean) rstd, y = xhat w + b, g = dy w:
  //   dx = rstd (g - mean_C(g) - xhat mean_C(g xhat)),  dw = sum_rows dy xhat,  db = sum_rows dy
  bool gx = x.requires_grad(), gw = weight.defined() && weight.requires_grad(),
       gb = bias.defined() && bias.requires_grad();
  return autograd::record(
      "layer_norm", {x, weight, bias}, out,
      [xs = xc.detach(), wc, mean, rstd, rows, C, gx, gw, gb](const TensorList& g) {
        Tensor gc = dense(g[0]);
        Tensor dx = gx ? Tensor::empty(xs.shape(), xs.dtype(), xs.device()) : Tensor();
        Tensor dw = gw ? Tensor::empty({C}, xs.dtype(), xs.device()) : Tensor();
        Tensor db = gb ? Tensor::empty({C}, xs.dtype(), xs.device()) : Tensor();
        if (rows == 0) {
          if (dw.defined()) dw.zero_();
          if (db.defined()) db.zero_();
          return TensorList{dx, dw, db};
        }
        ZDL_DISPATCH_FLOAT_OR_BF16(xs.dtype(), "layer_norm backward", [&](auto tag) {
          using T = decltype(tag);
          kc::layer_norm_backward<T>(rows, C, xs.data<T>(), wc.defined() ? wc.data<T>() : nullptr,
                                     mean.data<kc::compute_t<T>>(), rstd.data<kc::compute_t<T>>(), gc.data<T>(),
                                     gx ? dx.data<T>() : nullptr, gw ? dw.data<T>() : nullptr,
                                     gb ? db.data<T>() : nullptr);
        });
        return TensorList{dx, dw, db};
      },
      {xc, wc});
}

// ---- softmax ----

Tensor softmax(const Tensor& x, int64_t dim) {
  if (bf16_on_cpu("softmax", {&x})) return to_bf16(softmax(to_f32(x), dim));
  ZDL_CHECK(x.dim() >= 1, "softmax: needs at least one dimension, got shape=", shape_str(x.shape()));
  const int64_t d = x.wrap_dim(dim);
  // Other dims: move `d` last, use the row kernel, move it back (the transposes carry the
  // gradient). The result is made contiguous so callers get the usual layout.
  if (d != x.dim() - 1) return contiguous(transpose(softmax(transpose(x, d, -1), -1), d, -1));
#ifdef ZDL_WITH_CUDA
  if (on_cuda("softmax", x)) return softmax_lastdim_cuda(x);
#endif
  check_cpu("softmax", x);
  const int64_t C = x.size(-1), rows = C == 0 ? 0 : x.numel() / C;
  Tensor xc = dense(x);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (rows == 0) return out;
  ZDL_DISPATCH_FLOAT(x.dtype(), "softmax", [&](auto tag) {
    using T = decltype(tag);
    kc::softmax_forward<T>(rows, C, xc.data<T>(), out.data<T>());
  });
  // dy_i/dx_j = y_i ([i == j] - y_j)  =>  dx = y * (dy - sum_C(dy * y))
  return autograd::record("softmax", {x}, out, [y = out.detach(), rows, C](const TensorList& g) {
    Tensor gc = dense(g[0]);
    Tensor dx = Tensor::empty(y.shape(), y.dtype(), y.device());
    ZDL_DISPATCH_FLOAT(y.dtype(), "softmax backward", [&](auto tag) {
      using T = decltype(tag);
      kc::softmax_backward<T>(rows, C, y.data<T>(), gc.data<T>(), dx.data<T>());
    });
    return TensorList{dx};
  }, {out});
}

// ---- embedding ----

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  check_float_args("embedding", {&weight});
#ifdef ZDL_WITH_CUDA
  if (on_cuda("embedding", weight)) return embedding_cuda(weight, ids);
#endif
  check_cpu("embedding", weight);
  check_index_dtype("embedding", ids, "ids");
  check_same_device(weight, ids, "embedding");  // both on the CPU: weight was checked
  ZDL_CHECK(weight.dim() == 2, "embedding: weight must be 2-D [V, C], got weight shape=", shape_str(weight.shape()),
            " (ids shape=", shape_str(ids.shape()), ")");
  const int64_t V = weight.size(0), C = weight.size(1), n = ids.numel();
  Tensor idc = dense(ids).detach();
  Tensor wc = dense(weight);
  dispatch_index(ids.dtype(), [&](auto itag) {
    using I = decltype(itag);
    int64_t bad = n == 0 ? -1 : kc::embedding_first_bad_id<I>(n, idc.data<I>(), V);
    ZDL_CHECK(bad < 0, "embedding: id ", bad < 0 ? 0 : static_cast<int64_t>(idc.data<I>()[bad]),
              " at flat position ", bad, " is out of range [0, V=", V, ") (weight shape=", shape_str(weight.shape()),
              ", ids shape=", shape_str(ids.shape()), ")");
  });
  Shape out_shape = ids.shape();
  out_shape.push_back(C);  // [S..., C]
  Tensor out = Tensor::empty(out_shape, weight.dtype(), weight.device());
  if (out.numel() > 0) {
    ZDL_DISPATCH_FLOAT_OR_BF16(weight.dtype(), "embedding", [&](auto tag) {
      using T = decltype(tag);
      dispatch_index(ids.dtype(), [&](auto itag) {
        using I = decltype(itag);
        kc::embedding_forward<T, I>(n, C, wc.data<T>(), idc.data<I>(), out.data<T>());
      });
    });
  }
  // d out[s, c] / d weight[v, c] = [ids[s] == v]  =>  dweight[v] = sum over {s : ids[s] == v} of dout[s]
  return autograd::record("embedding", {weight}, out, [idc, V, C, dt = weight.dtype(), dev = weight.device()](
                                                          const TensorList& g) {
    Tensor dw = Tensor::empty({V, C}, dt, dev);
    if (dw.numel() == 0) return TensorList{dw};
    Tensor gc = dense(g[0]);
    ZDL_DISPATCH_FLOAT_OR_BF16(dt, "embedding backward", [&](auto tag) {
      using T = decltype(tag);
      dispatch_index(idc.dtype(), [&](auto itag) {
        using I = decltype(itag);
        kc::embedding_backward<T, I>(idc.numel(), V, C, idc.data<I>(), gc.data<T>(), dw.data<T>());
      });
    });
    return TensorList{dw};
  }, {idc});
}

// ---- cross_entropy ----

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index, int64_t num_classes) {
  // bf16 logits: the loss is f32 (as under PyTorch autocast, losses are reduced in f32), the
  // row statistics too; the gradient w.r.t. the logits is bf16.
  check_float_args("cross_entropy", {&logits});
#ifdef ZDL_WITH_CUDA
  if (on_cuda("cross_entropy", logits)) return cross_entropy_cuda(logits, targets, ignore_index, num_classes);
#endif
  check_cpu("cross_entropy", logits);
  check_cross_entropy_args(logits, targets, num_classes);
  const int64_t N = logits.size(0), ld = logits.size(1), V = num_classes > 0 ? num_classes : ld;
  Tensor lc = dense(logits);
  Tensor tc = dense(targets).detach();
  int64_t count = 0;
  dispatch_index(targets.dtype(), [&](auto itag) {
    using I = decltype(itag);
    int64_t bad = N == 0 ? -1 : kc::cross_entropy_first_bad_target<I>(N, tc.data<I>(), V, ignore_index, &count);
    ZDL_CHECK(bad < 0, "cross_entropy: target ", bad < 0 ? 0 : static_cast<int64_t>(tc.data<I>()[bad]), " at row ",
              bad, " is out of range [0, V=", V, ") and is not ignore_index=", ignore_index,
              " (logits shape=", shape_str(logits.shape()), ", targets shape=", shape_str(targets.shape()), ")");
  });
  const DType acc = kc::compute_dtype(logits.dtype());  // of the loss and row statistics: f32 for bf16
  Tensor row_max = Tensor::empty({N}, acc, logits.device());  // (N,)
  Tensor row_lse = Tensor::empty({N}, acc, logits.device());  // (N,) log sum exp(x - max)
  double total = 0.0;
  if (count > 0) {
    ZDL_DISPATCH_FLOAT_OR_BF16(logits.dtype(), "cross_entropy", [&](auto tag) {
      using T = decltype(tag);
      using A = kc::compute_t<T>;
      dispatch_index(targets.dtype(), [&](auto itag) {
        using I = decltype(itag);
        total = kc::cross_entropy_forward<T, I>(N, V, ld, lc.data<T>(), tc.data<I>(), ignore_index,
                                                row_max.data<A>(), row_lse.data<A>());
      });
    });
  }
  // Mean over non-ignored rows; all rows ignored -> 0 (and zero gradients), not NaN.
  Tensor out = Tensor::scalar(count > 0 ? total / static_cast<double>(count) : 0.0, acc, logits.device());
  // loss = (1/count) sum_n (max_n + lse_n - x[n, t_n])
  //   => dloss/dx[n, v] = (softmax(x_n)_v - [v == t_n]) / count,  softmax_v = exp(x_v - max - lse)
  return autograd::record(
      "cross_entropy", {logits}, out,
      [xs = lc.detach(), tc, row_max, row_lse, ignore_index, count, N, V, ld](const TensorList& g) {
        Tensor dl = gradient_buffer(xs);
        if (dl.numel() == 0) return TensorList{dl};
        if (count == 0) {
          dl.zero_();
          return TensorList{dl};
        }
        double scale = g[0].item() / static_cast<double>(count);
        ZDL_DISPATCH_FLOAT_OR_BF16(xs.dtype(), "cross_entropy backward", [&](auto tag) {
          using T = decltype(tag);
          using A = kc::compute_t<T>;
          dispatch_index(tc.dtype(), [&](auto itag) {
            using I = decltype(itag);
            kc::cross_entropy_backward<T, I>(N, V, ld, xs.data<T>(), tc.data<I>(), ignore_index, row_max.data<A>(),
                                             row_lse.data<A>(), scale, dl.data<T>());
          });
        });
        return TensorList{dl};
      },
      {lc, tc});
}

// ---- dropout ----

Tensor dropout(const Tensor& x, double p, bool training, uint64_t seed, uint64_t stream, int64_t offset) {
  check_float_args("dropout", {&x});
  ZDL_CHECK(p >= 0.0 && p < 1.0, "dropout: p must be in [0, 1), got p=", p, " (x shape=", shape_str(x.shape()), ")");
  ZDL_CHECK(offset >= 0, "dropout: offset must be >= 0, got ", offset);
  if (!training || p == 0.0) return x;
#ifdef ZDL_WITH_CUDA
  if (on_cuda("dropout", x)) return dropout_cuda(x, p, seed, stream, offset);
#endif
  check_cpu("dropout", x);
  Tensor xc = dense(x);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (out.numel() == 0) return out;
  ZDL_DISPATCH_FLOAT_OR_BF16(x.dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    kc::dropout_forward<T>(xc.numel(), xc.data<T>(), p, seed, stream, out.data<T>(), offset);
  });
  // d out_i / d x_i = keep_i / (1 - p): the same mask, regenerated from (seed, stream, i)
  // rather than saved (kernels/cpu/dropout.h).
  return autograd::record("dropout", {x}, out, [p, seed, stream, offset](const TensorList& g) {
    Tensor gc = dense(g[0]);
    Tensor dx = Tensor::empty(gc.shape(), gc.dtype(), gc.device());
    ZDL_DISPATCH_FLOAT_OR_BF16(gc.dtype(), "dropout backward", [&](auto tag) {
      using T = decltype(tag);
      kc::dropout_backward<T>(gc.numel(), gc.data<T>(), p, seed, stream, dx.data<T>(), offset);
    });
    return TensorList{dx};
  });
}

}  // namespace zdl

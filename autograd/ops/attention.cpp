// Causal scaled-dot-product attention, forward next to its backward.
//
// q, k, v usually arrive as transposed views of a fused QKV projection ([B, T, NH, HS] viewed
// as [B, NH, T, HS]); the kernels want contiguous [B*NH, T, HS], so non-contiguous inputs are
// copied once here and the copies are what backward keeps. Saved for backward: q, k, v, the
// output and the per-row logsumexp [B, NH, T] - not the [B, NH, T, T] probabilities, which
// backward recomputes block by block (see [Note: what attention saves] in
// kernels/cpu/attention.h). Scratch memory is allocated here, tagged Workspace.
// The backward is a fused kernel, so this op is not twice differentiable.
//
// CUDA tensors (ZDL_CUDA builds) run kernels/cuda/attention.h: f32 or bf16 natively, the same
// saved state (q, k, v, out, and lse - in f32 whatever the inputs' dtype), head sizes up to 128.
// Builds with the cuDNN frontend (ZDL_WITH_CUDNN_FRONTEND) run bf16 through cuDNN's fused flash
// attention instead (kernels/cuda/cudnn_attention.h), reading q, k, v through their strides
// (no copies: the views themselves are saved) and saving cuDNN's softmax statistics as lse;
// see causal_attention_cuda for which calls take it.
#include <cstdint>
#include <optional>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/ops/op_checks.h"
#include "core/memory.h"
#include "kernels/cpu/attention.h"
#ifdef ZDL_WITH_CUDA
#include "kernels/cuda/attention.h"
#endif
#ifdef ZDL_WITH_CUDNN_FRONTEND
#include "kernels/cuda/cudnn_attention.h"
#endif

namespace zdl {

using autograd::TensorList;
using namespace ops_detail;

namespace {

Tensor contiguous_detached(const Tensor& a) { return a.is_contiguous() ? a.detach() : a.contiguous_copy(); }

Tensor workspace(int64_t elems, DType dtype, Device device = Device::cpu()) {
  MemoryScope scope(MemoryCategory::Workspace);
  return Tensor::empty({elems}, dtype, device);
}

void check_attention_shapes(const Tensor& q, const Tensor& k, const Tensor& v) {
  ZDL_CHECK(q.dim() == 4, "causal_attention: q must be 4-D [B, NH, T, HS], got q.shape=", shape_str(q.shape()));
  ZDL_CHECK(k.shape() == q.shape(), "causal_attention: k.shape=", shape_str(k.shape()),
            " != q.shape=", shape_str(q.shape()), " (both must be [B, NH, T, HS])");
  ZDL_CHECK(v.shape() == q.shape(), "causal_attention: v.shape=", shape_str(v.shape()),
            " != q.shape=", shape_str(q.shape()), " (both must be [B, NH, T, HS])");
}

#ifdef ZDL_WITH_CUDA
namespace kcu = kernels::cuda;

// The gradient of causal_attention's output, checked against the output, as it is (detached).
Tensor checked_output_gradient(const Tensor& g, DType dt, Device dev) {
  check_defined(g, "causal_attention backward", "gradient");
  ZDL_CHECK(g.device() == dev && g.dtype() == dt, "causal_attention backward: gradient on ", g.device().str(),
            " of dtype ", dtype_name(g.dtype()), " but the output is on ", dev.str(), " of dtype ", dtype_name(dt));
  return g.detach();
}

// The same, contiguous.
Tensor output_gradient(const Tensor& g, DType dt, Device dev) {
  return contiguous_detached(checked_output_gradient(g, dt, dev));
}

// dq, dk, dv by the kernels of kernels/cuda/attention.h from the forward's q, k, v (copied
// when they are views), out and lse [B, NH, T] f32, and the contiguous output gradient.
TensorList attention_backward_kernels(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                      const Tensor& lse, const Tensor& dout) {
  const int64_t BNH = q.size(0) * q.size(1), T = q.size(2), HS = q.size(3);
  const DType dt = q.dtype();
  const Device dev = q.device();
  Tensor qc = contiguous_detached(q), kc = contiguous_detached(k), vc = contiguous_detached(v);
  Tensor oc = contiguous_detached(out);  // cuDNN's output is [B, T, NH, HS] in memory
  Tensor dq = Tensor::empty(q.shape(), dt, dev), dk = Tensor::empty(q.shape(), dt, dev),
         dv = Tensor::empty(q.shape(), dt, dev);
  Tensor work = workspace(static_cast<int64_t>(kcu::attention_backward_workspace_bytes(BNH, T) / sizeof(float)),
                          DType::F32, dev);
  kcu::causal_attention_backward(dt, BNH, T, HS, qc.raw_data(), kc.raw_data(), vc.raw_data(), oc.raw_data(),
                                 lse.data<float>(), dout.raw_data(), dq.raw_data(), dk.raw_data(), dv.raw_data(),
                                 work.raw_data());
  return TensorList{dq, dk, dv};
}

#ifdef ZDL_WITH_CUDNN_FRONTEND
bool aligned16(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.raw_data()) % 16 == 0; }

// `bytes` of device scratch for cuDNN (as f32 elements, rounded up), tagged Workspace (null
// when none is needed).
Tensor cudnn_workspace(size_t bytes, Device dev) {
  return bytes ? workspace(static_cast<int64_t>((bytes + sizeof(float) - 1) / sizeof(float)), DType::F32, dev)
               : Tensor();
}
void* pointer_or_null(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }

// The cuDNN problem of q, k, v when cuDNN may take them, else nullopt. cuDNN 9's fused SDPA
// (the frontend's support surface, cudnn_frontend/node/sdpa_support_surface.h and the backward
// node's checks in scaled_dot_product_flash_attention.h) takes bf16, a head size that is a
// multiple of 8 and at most 128 on every GPU it supports (Ampere and newer; Hopper goes to
// 256), a unit stride on the head dimension, and operands and strides in multiples of 16 bytes
// (its vector loads; older frontends do not check strides, and cuDNN then reads wrong data);
// the built-in kernels stop at HS = 128 too, so both paths cover the same shapes. The
// rest (T = 1 in the backward, a GPU or cuDNN without the engine) is cuDNN's to refuse.
std::optional<kcu::SdpaProblem> cudnn_problem(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (!kcu::cudnn_attention_enabled() || q.numel() == 0) return std::nullopt;
  for (const Tensor* t : {&q, &k, &v}) {
    const Shape& st = t->strides();
    if (t->dtype() != DType::BF16 || t->device() != q.device() || st[3] != 1 || st[0] % 8 != 0 || st[1] % 8 != 0 ||
        st[2] % 8 != 0 || !aligned16(*t))
      return std::nullopt;
  }
  const int64_t HS = q.size(3);
  if (HS % 8 != 0 || HS > 128) return std::nullopt;
  kcu::SdpaProblem p{.dtype = q.dtype(), .b = q.size(0), .nh = q.size(1), .t = q.size(2), .hs = HS};
  for (int d = 0; d < 4; ++d) {
    p.q_stride[d] = q.strides()[d];
    p.k_stride[d] = k.strides()[d];
    p.v_stride[d] = v.strides()[d];
  }
  // [Note: attention layouts] The output is written as [B, T, NH, HS] (so the GPT's
  // transpose + reshape to [B, T, C] is a view), the output gradient that comes back through
  // that view is read in place, and dq, dk, dv are written side by side into one [B, T, 3C]
  // buffer (so split's backward takes it as the fused projection's gradient without a copy).
  const int64_t C = p.nh * HS;
  p.o_stride = {p.t * C, HS, C, 1};
  p.dqkv_stride = {p.t * 3 * C, HS, 3 * C, 1};
  return p;
}

// The [B, NH, T, HS] view, with strides `st`, of `buffer` from element `offset` on.
Tensor strided_view(const Tensor& buffer, const kcu::SdpaProblem& p, const std::array<int64_t, 4>& st,
                    int64_t offset) {
  return Tensor::from_storage(buffer.storage(), {p.b, p.nh, p.t, p.hs}, {st[0], st[1], st[2], st[3]},
                              buffer.offset() + offset, buffer.dtype());
}

// causal_attention through cuDNN (its graphs for p exist: forward, and backward when grad).
Tensor causal_attention_cudnn(const Tensor& q, const Tensor& k, const Tensor& v, const kcu::SdpaProblem& p,
                              size_t forward_workspace, bool grad) {
  const Device dev = q.device();
  const int64_t C = p.nh * p.hs;
  // [B, NH, T, HS] seen through a [B, T, C] buffer ([Note: attention layouts]).
  Tensor out = strided_view(Tensor::empty({p.b, p.t, C}, q.dtype(), dev), p, p.o_stride, 0);
  // cuDNN's statistics, the lse: saved for the backward, or scratch for inference.
  Tensor lse = grad ? Tensor::empty({p.b, p.nh, p.t}, DType::F32, dev) : workspace(p.b * p.nh * p.t, DType::F32, dev);
  {
    Tensor work = cudnn_workspace(forward_workspace, dev);
    kcu::cudnn_attention_forward(p, q.raw_data(), k.raw_data(), v.raw_data(), out.raw_data(), lse.data<float>(),
                                 pointer_or_null(work));
  }
  if (!grad) return out;
  return autograd::record(
      "causal_attention", {q, k, v}, out,
      [p, qs = q.detach(), ks = k.detach(), vs = v.detach(), o = out.detach(), lse](const TensorList& g) {
        const DType dt = qs.dtype();
        const Device dev = qs.device();
        const int64_t C = p.nh * p.hs;
        // The output gradient as the graph reads it: in place when it comes back through the
        // [B, T, C] view of the output (the GPT's), else copied into that layout, so one
        // backward graph serves every caller ([Note: attention layouts]).
        Tensor dout = checked_output_gradient(g[0], dt, dev);
        const Shape expected = {p.o_stride[0], p.o_stride[1], p.o_stride[2], p.o_stride[3]};
        if (dout.strides() != expected || !aligned16(dout)) {
          Tensor packed = strided_view(Tensor::empty({p.b, p.t, C}, dt, dev), p, p.o_stride, 0);
          packed.copy_(dout);
          dout = packed;
        }
        // Built with the forward; a backward on another thread builds its own, and a refusal
        // there leaves the kernels, which read the same lse.
        const std::optional<size_t> bytes =
            kcu::cudnn_attention_plan(p, kcu::SdpaPass::Backward, kcu::SdpaCaller::Training);
        if (!bytes) return attention_backward_kernels(qs, ks, vs, o, lse, contiguous_detached(dout));
        Tensor grads = Tensor::empty({p.b, p.t, 3 * C}, dt, dev);  // dq, dk, dv side by side
        Tensor dq = strided_view(grads, p, p.dqkv_stride, 0), dk = strided_view(grads, p, p.dqkv_stride, C),
               dv = strided_view(grads, p, p.dqkv_stride, 2 * C);
        Tensor work = cudnn_workspace(*bytes, dev);
        kcu::cudnn_attention_backward(p, qs.raw_data(), ks.raw_data(), vs.raw_data(), o.raw_data(), dout.raw_data(),
                                      lse.data<float>(), dq.raw_data(), dk.raw_data(), dv.raw_data(),
                                      pointer_or_null(work));
        return TensorList{dq, dk, dv};
      },
      {q, k, v, out});
}
#endif

// Same contract as the CPU path below (q's dtype checked by on_cuda). Which implementation runs:
// - cuDNN (ZDL_WITH_CUDNN_FRONTEND builds, not disabled by ZDL_CUDNN_ATTENTION=0) for the
//   problems cudnn_problem accepts and cuDNN builds graphs for. A call that needs gradients
//   builds the forward and backward graphs of its shape (once per thread and device), so a
//   shape cuDNN refuses runs on the kernels in both passes; so does a checkpointed block's
//   forward (autograd::recomputable_forward), which must give its recompute's bits. Another
//   call without gradients builds forward graphs for a few new shapes only
//   (kCudnnInferenceShapes: evaluation) and runs further new ones on the kernels (a sampler
//   grows its length by a token per call).
// - otherwise the kernels of kernels/cuda/attention.h on contiguous [B*NH, T, HS] copies.
Tensor causal_attention_cuda(const Tensor& q, const Tensor& k, const Tensor& v) {
  check_attention_shapes(q, k, v);
  const int64_t B = q.size(0), NH = q.size(1), T = q.size(2), HS = q.size(3), BNH = B * NH;
  ZDL_CHECK(HS <= kcu::kAttentionMaxHeadSize, "causal_attention: head size HS=", HS,
            " is not supported on CUDA (at most ", kcu::kAttentionMaxHeadSize, "), q.shape=", shape_str(q.shape()));
  const bool grad = autograd::needs_grad({q, k, v});
#ifdef ZDL_WITH_CUDNN_FRONTEND
  if (const std::optional<kcu::SdpaProblem> p = cudnn_problem(q, k, v)) {
    // A checkpointed block's forward (no graph) chooses as its recompute (with one) will.
    const bool training = grad || recomputable_forward();
    const auto caller = training ? kcu::SdpaCaller::Training : kcu::SdpaCaller::Inference;
    const std::optional<size_t> forward = kcu::cudnn_attention_plan(*p, kcu::SdpaPass::Forward, caller);
    if (forward && (!training || kcu::cudnn_attention_plan(*p, kcu::SdpaPass::Backward, caller)))
      return causal_attention_cudnn(q, k, v, *p, *forward, grad);
  }
#endif
  const Device dev = q.device();
  Tensor qc = contiguous_detached(q), kc = contiguous_detached(k), vc = contiguous_detached(v);
  Tensor out = Tensor::empty(q.shape(), q.dtype(), dev);  // [B, NH, T, HS]
  Tensor lse = grad ? Tensor::empty({B, NH, T}, DType::F32, dev) : Tensor();  // [B, NH, T] f32
  if (out.numel() > 0)
    kcu::causal_attention_forward(q.dtype(), BNH, T, HS, qc.raw_data(), kc.raw_data(), vc.raw_data(), out.raw_data(),
                                  grad ? lse.data<float>() : nullptr);
  if (!grad) return out;
  return autograd::record(
      "causal_attention", {q, k, v}, out, [qc, kc, vc, o = out.detach(), lse](const TensorList& g) {
        auto empty = [&] { return Tensor::empty(qc.shape(), qc.dtype(), qc.device()); };
        if (qc.numel() == 0) return TensorList{empty(), empty(), empty()};
        return attention_backward_kernels(qc, kc, vc, o, lse, output_gradient(g[0], qc.dtype(), qc.device()));
      },
      {qc, kc, vc, out});
}
#endif

}  // namespace

Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v) {
  check_float_args("causal_attention", {&q, &k, &v});
#ifdef ZDL_WITH_CUDA
  if (on_cuda("causal_attention", q)) return causal_attention_cuda(q, k, v);
#endif
  check_cpu("causal_attention", q);
  check_attention_shapes(q, k, v);
  const int64_t B = q.size(0), NH = q.size(1), T = q.size(2), HS = q.size(3), BNH = B * NH;
  const DType acc = kernels::cpu::compute_dtype(q.dtype());  // of lse and the scratch: f32 for bf16

  Tensor qc = contiguous_detached(q), kc = contiguous_detached(k), vc = contiguous_detached(v);
  Tensor out = Tensor::empty(q.shape(), q.dtype(), q.device());  // [B, NH, T, HS]
  const bool grad = autograd::needs_grad({q, k, v});
  Tensor lse = grad ? Tensor::empty({B, NH, T}, acc, q.device()) : Tensor();  // [B, NH, T]
  const int threads = kernels::cpu::attention_threads(BNH, T, HS);
  if (out.numel() > 0) {
    ZDL_DISPATCH_FLOAT_OR_BF16(q.dtype(), "causal_attention", [&](auto tag) {
      using F = decltype(tag);
      using A = kernels::cpu::compute_t<F>;
      Tensor work = workspace(kernels::cpu::attention_forward_workspace<F>(BNH, T, HS, threads), acc);
      kernels::cpu::causal_attention_forward<F>(BNH, T, HS, qc.data<F>(), kc.data<F>(), vc.data<F>(), out.data<F>(),
                                                grad ? lse.data<A>() : nullptr, threads, work.data<A>());
    });
  }
  if (!grad) return out;

  // With S = q k^T / sqrt(HS) (masked), P = softmax(S), out = P v:
  //   dv = P^T dout,  dP = dout v^T,  dS = P * (dP - rowsum(dout * out)),
  //   dq = dS k / sqrt(HS),  dk = dS^T q / sqrt(HS).
  return autograd::record(
      "causal_attention", {q, k, v}, out,
      [qc, kc, vc, o = out.detach(), lse](const TensorList& g) {
        const int64_t B = qc.size(0), NH = qc.size(1), T = qc.size(2), HS = qc.size(3), BNH = B * NH;
        Tensor dout = contiguous_detached(g[0]);
        Tensor dq = Tensor::empty(qc.shape(), qc.dtype(), qc.device());
        Tensor dk = Tensor::empty(qc.shape(), qc.dtype(), qc.device());
        Tensor dv = Tensor::empty(qc.shape(), qc.dtype(), qc.device());
        if (dq.numel() == 0) return TensorList{dq, dk, dv};
        const int threads = kernels::cpu::attention_threads(BNH, T, HS);
        ZDL_DISPATCH_FLOAT_OR_BF16(qc.dtype(), "causal_attention backward", [&](auto tag) {
          using F = decltype(tag);
          using A = kernels::cpu::compute_t<F>;
          Tensor work = workspace(kernels::cpu::attention_backward_workspace<F>(BNH, T, HS, threads), lse.dtype());
          kernels::cpu::causal_attention_backward<F>(BNH, T, HS, qc.data<F>(), kc.data<F>(), vc.data<F>(), o.data<F>(),
                                                     lse.data<A>(), dout.data<F>(), dq.data<F>(), dk.data<F>(),
                                                     dv.data<F>(), threads, work.data<A>());
        });
        return TensorList{dq, dk, dv};
      },
      {qc, kc, vc, out});
}

}  // namespace zdl

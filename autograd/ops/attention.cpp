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
#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/ops/bf16_compute.h"
#include "autograd/ops/op_checks.h"
#include "core/memory.h"
#include "kernels/cpu/attention.h"
#ifdef ZDL_WITH_CUDA
#include "kernels/cuda/attention.h"
#endif

namespace zdl {

using autograd::TensorList;
using namespace ops_detail;

namespace {

Tensor contiguous_detached(const Tensor& a) { return a.is_contiguous() ? a.detach() : a.contiguous_copy(); }

Tensor workspace(int64_t elems, DType dtype) {
  MemoryScope scope(MemoryCategory::Workspace);
  return Tensor::empty({elems}, dtype, Device::cpu());
}

void check_attention_shapes(const Tensor& q, const Tensor& k, const Tensor& v) {
  ZDL_CHECK(q.dim() == 4, "causal_attention: q must be 4-D [B, NH, T, HS], got q.shape=", shape_str(q.shape()));
  ZDL_CHECK(k.shape() == q.shape(), "causal_attention: k.shape=", shape_str(k.shape()),
            " != q.shape=", shape_str(q.shape()), " (both must be [B, NH, T, HS])");
  ZDL_CHECK(v.shape() == q.shape(), "causal_attention: v.shape=", shape_str(v.shape()),
            " != q.shape=", shape_str(q.shape()), " (both must be [B, NH, T, HS])");
}

#ifdef ZDL_WITH_CUDA
// Same contract as the CPU path below (q's dtype checked by on_cuda); the kernels take
// contiguous [B*NH, T, HS] buffers.
Tensor causal_attention_cuda(const Tensor& q, const Tensor& k, const Tensor& v) {
  namespace kcu = kernels::cuda;
  check_attention_shapes(q, k, v);
  const int64_t B = q.size(0), NH = q.size(1), T = q.size(2), HS = q.size(3), BNH = B * NH;
  ZDL_CHECK(HS <= kcu::kAttentionMaxHeadSize, "causal_attention: head size HS=", HS,
            " is not supported on CUDA (at most ", kcu::kAttentionMaxHeadSize, "), q.shape=", shape_str(q.shape()));
  const Device dev = q.device();
  Tensor qc = contiguous_detached(q), kc = contiguous_detached(k), vc = contiguous_detached(v);
  Tensor out = Tensor::empty(q.shape(), q.dtype(), dev);  // [B, NH, T, HS]
  const bool grad = autograd::needs_grad({q, k, v});
  Tensor lse = grad ? Tensor::empty({B, NH, T}, DType::F32, dev) : Tensor();  // [B, NH, T] f32
  if (out.numel() > 0)
    kcu::causal_attention_forward(q.dtype(), BNH, T, HS, qc.raw_data(), kc.raw_data(), vc.raw_data(), out.raw_data(),
                                  grad ? lse.data<float>() : nullptr);
  if (!grad) return out;
  return autograd::record(
      "causal_attention", {q, k, v}, out, [qc, kc, vc, o = out.detach(), lse](const TensorList& g) {
        const int64_t B = qc.size(0), NH = qc.size(1), T = qc.size(2), HS = qc.size(3), BNH = B * NH;
        const DType dt = qc.dtype();
        const Device dev = qc.device();
        Tensor dq = Tensor::empty(qc.shape(), dt, dev);
        Tensor dk = Tensor::empty(qc.shape(), dt, dev);
        Tensor dv = Tensor::empty(qc.shape(), dt, dev);
        if (dq.numel() == 0) return TensorList{dq, dk, dv};
        check_defined(g[0], "causal_attention backward", "gradient");
        ZDL_CHECK(g[0].device() == dev && g[0].dtype() == dt, "causal_attention backward: gradient on ",
                  g[0].device().str(), " of dtype ", dtype_name(g[0].dtype()), " but the output is on ", dev.str(),
                  " of dtype ", dtype_name(dt));
        Tensor dout = contiguous_detached(g[0]);
        Tensor work;
        {
          MemoryScope scope(MemoryCategory::Workspace);
          work = Tensor::empty({static_cast<int64_t>(kcu::attention_backward_workspace_bytes(BNH, T) / sizeof(float))},
                               DType::F32, dev);
        }
        kcu::causal_attention_backward(dt, BNH, T, HS, qc.raw_data(), kc.raw_data(), vc.raw_data(), o.raw_data(),
                                       lse.data<float>(), dout.raw_data(), dq.raw_data(), dk.raw_data(), dv.raw_data(),
                                       work.raw_data());
        return TensorList{dq, dk, dv};
      });
}
#endif

}  // namespace

Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (bf16_on_cpu("causal_attention", {&q, &k, &v})) return to_bf16(causal_attention(to_f32(q), to_f32(k), to_f32(v)));
#ifdef ZDL_WITH_CUDA
  if (on_cuda("causal_attention", q)) return causal_attention_cuda(q, k, v);
#endif
  check_cpu("causal_attention", q);
  check_attention_shapes(q, k, v);
  const int64_t B = q.size(0), NH = q.size(1), T = q.size(2), HS = q.size(3), BNH = B * NH;

  Tensor qc = contiguous_detached(q), kc = contiguous_detached(k), vc = contiguous_detached(v);
  Tensor out = Tensor::empty(q.shape(), q.dtype(), q.device());  // [B, NH, T, HS]
  const bool grad = autograd::needs_grad({q, k, v});
  Tensor lse = grad ? Tensor::empty({B, NH, T}, q.dtype(), q.device()) : Tensor();  // [B, NH, T]
  const int threads = kernels::cpu::attention_threads(BNH, T, HS);
  if (out.numel() > 0) {
    Tensor work = workspace(kernels::cpu::attention_forward_workspace(BNH, T, HS, threads), q.dtype());
    ZDL_DISPATCH_FLOAT(q.dtype(), "causal_attention", [&](auto tag) {
      using F = decltype(tag);
      kernels::cpu::causal_attention_forward<F>(BNH, T, HS, qc.data<F>(), kc.data<F>(), vc.data<F>(), out.data<F>(),
                                                grad ? lse.data<F>() : nullptr, threads, work.data<F>());
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
        Tensor work = workspace(kernels::cpu::attention_backward_workspace(BNH, T, HS, threads), qc.dtype());
        ZDL_DISPATCH_FLOAT(qc.dtype(), "causal_attention backward", [&](auto tag) {
          using F = decltype(tag);
          kernels::cpu::causal_attention_backward<F>(BNH, T, HS, qc.data<F>(), kc.data<F>(), vc.data<F>(), o.data<F>(),
                                                     lse.data<F>(), dout.data<F>(), dq.data<F>(), dk.data<F>(),
                                                     dv.data<F>(), threads, work.data<F>());
        });
        return TensorList{dq, dk, dv};
      });
}

}  // namespace zdl

// Causal scaled-dot-product attention, forward next to its backward.
//
// q, k, v usually arrive as transposed views of a fused QKV projection ([B, T, NH, HS] viewed
// as [B, NH, T, HS]); the kernels want contiguous [B*NH, T, HS], so non-contiguous inputs are
// copied once here and the copies are what backward keeps. Saved for backward: q, k, v, the
// output and the per-row logsumexp [B, NH, T] - not the [B, NH, T, T] probabilities, which
// backward recomputes block by block (see [Note: what attention saves] in
// kernels/cpu/attention.h). Scratch memory is allocated here, tagged Workspace.
// The backward is a fused kernel, so this op is not twice differentiable.
#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/ops/bf16_compute.h"
#include "autograd/ops/op_checks.h"
#include "core/memory.h"
#include "kernels/cpu/attention.h"

namespace zdl {

using autograd::TensorList;
using namespace ops_detail;

namespace {

Tensor contiguous_detached(const Tensor& a) { return a.is_contiguous() ? a.detach() : a.contiguous_copy(); }

Tensor workspace(int64_t elems, DType dtype) {
  MemoryScope scope(MemoryCategory::Workspace);
  return Tensor::empty({elems}, dtype, Device::cpu());
}

}  // namespace

Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (bf16_on_cpu("causal_attention", {&q, &k, &v})) return to_bf16(causal_attention(to_f32(q), to_f32(k), to_f32(v)));
  check_cpu("causal_attention", q);
  ZDL_CHECK(q.dim() == 4, "causal_attention: q must be 4-D [B, NH, T, HS], got q.shape=", shape_str(q.shape()));
  ZDL_CHECK(k.shape() == q.shape(), "causal_attention: k.shape=", shape_str(k.shape()),
            " != q.shape=", shape_str(q.shape()), " (both must be [B, NH, T, HS])");
  ZDL_CHECK(v.shape() == q.shape(), "causal_attention: v.shape=", shape_str(v.shape()),
            " != q.shape=", shape_str(q.shape()), " (both must be [B, NH, T, HS])");
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

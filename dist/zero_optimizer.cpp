#include "dist/zero_optimizer.h"

#include <algorithm>

#include <cstring>

#include "autograd/grad_mode.h"
#include "kernels/cpu/optim.h"
#ifdef ZDL_WITH_CUDA
#include "kernels/cuda/optim.h"
#endif

namespace zdl::dist {

ZeroAdamW::ZeroAdamW(ZeroPartitioner& zero, const optim::AdamWOptions& o, double weight_decay)
    : zero_(zero), options_(o), weight_decay_(weight_decay) {
  ZDL_CHECK(o.lr >= 0 && o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1 && o.eps > 0,
            zero.comm().prefix(), " AdamW: bad hyperparameters lr=", o.lr, " beta1=", o.beta1, " beta2=", o.beta2,
            " eps=", o.eps);
}

void ZeroAdamW::build_device_tables() {
#ifdef ZDL_WITH_CUDA
  device_chunks_.clear();
  device_chunk_counts_.clear();
  for (auto& up : zero_.units()) {
    const ParamUnit& u = *up;
    const int64_t mb = u.master_begin, me = mb + u.master.numel();
    std::vector<kernels::cuda::AdamWSegment> segments;
    for (const ParamSlot& s : u.slots) {
      const int64_t lo = std::max(mb, s.offset), hi = std::min(me, s.offset + s.numel);
      if (lo < hi) segments.push_back({lo - mb, hi - lo, s.decay ? weight_decay_ : 0.0});
    }
    const std::vector<kernels::cuda::AdamWChunk> chunks = kernels::cuda::adamw_chunks(segments);
    const int64_t n = static_cast<int64_t>(chunks.size());
    static_assert(sizeof(kernels::cuda::AdamWChunk) == 3 * sizeof(int64_t));
    MemoryScope ms(MemoryCategory::Workspace);
    Tensor host = Tensor::empty({3 * n}, DType::I64);
    if (n > 0) std::memcpy(host.raw_data(), chunks.data(), chunks.size() * sizeof(kernels::cuda::AdamWChunk));
    device_chunks_.push_back(host.to(zero_.options().device));
    device_chunk_counts_.push_back(n);
  }
#endif
}

void ZeroAdamW::step(double grad_scale) {
  NoGradGuard ng;
  zero_.finish_grad_reductions();  // normally done when backward() returned
  zero_.emit(TraceKind::StepBegin, nullptr);
  ++step_;
#ifdef ZDL_WITH_CUDA
  if (zero_.options().device.is_cuda()) {
    if (device_chunks_.size() != zero_.units().size()) build_device_tables();
    kernels::cpu::AdamWParams h{options_.lr, options_.beta1, options_.beta2, options_.eps, 0.0, step_};
    for (size_t i = 0; i < zero_.units().size(); ++i) {
      ParamUnit& u = *zero_.units()[i];
      const int64_t n = device_chunk_counts_[i];
      if (n == 0) continue;
      // Master, moments and gradient shard are indexed alike (see the CPU loop below); decay per chunk.
      kernels::cuda::adamw_update(u.grad_shard.dtype(),
                                  static_cast<const kernels::cuda::AdamWChunk*>(device_chunks_[i].raw_data()), n,
                                  u.master.data<float>(), u.grad_shard.raw_data(), u.exp_avg.data<float>(),
                                  u.exp_avg_sq.data<float>(), h, grad_scale);
    }
    zero_.after_optimizer_step();
    return;
  }
#endif
  for (auto& up : zero_.units()) {
    ParamUnit& u = *up;
    const int64_t mb = u.master_begin, me = mb + u.master.numel();
    Tensor grad = u.grad_shard;  // indexed like the master (stage 0: full; else this rank's block)
    for (const ParamSlot& s : u.slots) {
      int64_t lo = std::max(mb, s.offset), hi = std::min(me, s.offset + s.numel);
      if (lo >= hi) continue;
      kernels::cpu::AdamWParams h{options_.lr, options_.beta1, options_.beta2, options_.eps,
                                  s.decay ? weight_decay_ : 0.0, step_};
      const int64_t at = lo - mb, n = hi - lo;
      auto run = [&](auto master_tag, auto grad_tag) {
        using T = decltype(master_tag);
        using G = decltype(grad_tag);
        using S = kernels::cpu::opt_state_t<T>;
        kernels::cpu::adamw_update<T, G>(n, u.master.data<T>() + at, grad.data<G>() + at, u.exp_avg.data<S>() + at,
                                         u.exp_avg_sq.data<S>() + at, h, grad_scale);
      };
      if (u.master.dtype() == DType::F64) run(double{}, double{});
      else if (grad.dtype() == DType::BF16) run(float{}, BFloat16{});
      else run(float{}, float{});
    }
  }
  zero_.after_optimizer_step();
}

}  // namespace zdl::dist

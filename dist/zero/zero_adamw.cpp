#include "dist/zero/zero_adamw.h"

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
  o.validate(zero.comm().prefix() + " ZeroAdamW");
  try {
    MemoryScope ms(MemoryCategory::OptimizerState);
    for (auto& u : zero_.units())
      moments_.push_back({Tensor::zeros({u->master.numel()}, u->master.dtype(), u->master.device()),
                          Tensor::zeros({u->master.numel()}, u->master.dtype(), u->master.device())});
  } catch (const OutOfMemoryError& e) {
    throw OutOfMemoryError(detail::str(zero_.comm().prefix(), " placing Adam's moments under ", stage_name(zero_.stage()),
                                       " (", zero_.num_parameters(), " parameters on ", zero_.comm().size(),
                                       " ranks): ", e.what(), "; shard more (a higher ZeRO stage or more ranks) or raise the cap"));
  }
}

void ZeroAdamW::build_device_tables() {
#ifdef ZDL_WITH_CUDA
  device_chunks_.clear();
  device_chunk_counts_.clear();
  for (auto& up : zero_.units()) {
    const ParamUnit& u = *up;
    std::vector<kernels::cuda::AdamWSegment> segments;
    for (const Segment& g : u.owned_segments())
      segments.push_back({g.begin - u.master_begin, g.numel(), g.slot->decay ? weight_decay_ : 0.0});
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
  zero_.wait_for_reductions();  // normally done when backward() returned
  zero_.check_gradients_complete("ZeroAdamW::step");
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
                                  u.master.data<float>(), u.grad_shard.raw_data(), moments_[i][0].data<float>(),
                                  moments_[i][1].data<float>(), h, grad_scale);
    }
    zero_.after_optimizer_step();
    return;
  }
#endif
  for (size_t i = 0; i < zero_.units().size(); ++i) {
    ParamUnit& u = *zero_.units()[i];
    const Tensor &m1 = moments_[i][0], &m2 = moments_[i][1];
    Tensor grad = u.grad_shard;  // indexed like the master (stage 0: full; else this rank's block)
    for (const Segment& g : u.owned_segments()) {
      kernels::cpu::AdamWParams h{options_.lr, options_.beta1, options_.beta2, options_.eps,
                                  g.slot->decay ? weight_decay_ : 0.0, step_};
      const int64_t at = g.begin - u.master_begin, n = g.numel();
      auto run = [&](auto master_tag, auto grad_tag) {
        using T = decltype(master_tag);
        using G = decltype(grad_tag);
        using S = kernels::cpu::opt_state_t<T>;
        kernels::cpu::adamw_update<T, G>(n, u.master.data<T>() + at, grad.data<G>() + at, m1.data<S>() + at,
                                         m2.data<S>() + at, h, grad_scale);
      };
      if (u.master.dtype() == DType::F64) run(double{}, double{});
      else if (grad.dtype() == DType::BF16) run(float{}, BFloat16{});
      else run(float{}, float{});
    }
  }
  zero_.after_optimizer_step();
}

}  // namespace zdl::dist

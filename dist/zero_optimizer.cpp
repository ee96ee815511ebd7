#include "dist/zero_optimizer.h"

#include <algorithm>

#include "autograd/grad_mode.h"
#include "kernels/cpu/optim.h"

namespace zdl::dist {

ZeroAdamW::ZeroAdamW(ZeroPartitioner& zero, const optim::AdamWOptions& o, double weight_decay)
    : zero_(zero), options_(o), weight_decay_(weight_decay) {
  ZDL_CHECK(o.lr >= 0 && o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1 && o.eps > 0,
            zero.comm().prefix(), " AdamW: bad hyperparameters lr=", o.lr, " beta1=", o.beta1, " beta2=", o.beta2,
            " eps=", o.eps);
}

void ZeroAdamW::step(double grad_scale) {
  NoGradGuard ng;
  zero_.emit(TraceKind::StepBegin, nullptr);
  ++step_;
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

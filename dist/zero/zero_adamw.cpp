#include "dist/zero/zero_adamw.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "autograd/grad_mode.h"
#include "kernels/cpu/optim.h"
#ifdef ZDL_WITH_CUDA
#include "kernels/cuda/optim.h"
#endif

namespace zdl::dist {

ZeroAdamW::ZeroAdamW(ZeroPartitioner& zero, const optim::AdamWOptions& o, double weight_decay)
    : zero_(zero), shards_(zero.optimizer_shards()), options_(o), weight_decay_(weight_decay) {
  o.validate(zero.comm().prefix() + " ZeroAdamW");
  ZDL_CHECK(std::isfinite(weight_decay), zero.comm().prefix(), " ZeroAdamW: weight decay ", weight_decay);
  try {
    MemoryScope ms(MemoryCategory::OptimizerState);
    const std::vector<const ParamUnit*> units = zero.units();
    for (size_t i = 0; i < shards_.size(); ++i) {
      const Tensor& m = shards_[i].master;
      moments_.push_back({Tensor::zeros({m.numel()}, m.dtype(), m.device()), Tensor::zeros({m.numel()}, m.dtype(), m.device())});
      if (!zero.policy().optimizer_on_nvme) continue;
      // Written to the store and freed unit by unit: at most one unit's moments in memory.
      std::array<std::unique_ptr<OffloadedBuffer>, 2> off;
      for (int k = 0; k < 2; ++k) {
        moments_.back()[k].storage()->set_label((k ? "exp_avg_sq of unit " : "exp_avg of unit ") + units[i]->name());
        off[k] = std::make_unique<OffloadedBuffer>(*zero.nvme_store(), moments_.back()[k]);
      }
      offloaded_moments_.push_back(std::move(off));
    }
    if (!offloaded_moments_.empty()) {
      std::vector<std::vector<OffloadedBuffer*>> per_unit;
      for (const auto& off : offloaded_moments_) per_unit.push_back({off[0].get(), off[1].get()});
      zero_.set_optimizer_states(std::move(per_unit));
    }
  } catch (const OutOfMemoryError& e) {
    throw OutOfMemoryError(detail::str(zero_.comm().prefix(), " placing Adam's moments under ", stage_name(zero_.stage()),
                                       " (", zero_.num_parameters(), " parameters on ", zero_.comm().size(),
                                       " ranks): ", e.what(), "; shard more (a higher ZeRO stage or more ranks) or raise the cap"));
  }
}

ZeroAdamW::~ZeroAdamW() {
  if (!offloaded_moments_.empty()) zero_.set_optimizer_states({});
}

void ZeroAdamW::build_device_tables() {
#ifdef ZDL_WITH_CUDA
  device_chunks_.clear();
  device_chunk_counts_.clear();
  for (const OptimizerShard& s : shards_) {
    std::vector<kernels::cuda::AdamWSegment> segments;
    for (const Segment& g : s.segments) segments.push_back({g.begin - s.begin, g.numel(), g.slot->decay ? weight_decay_ : 0.0});
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

std::vector<OffloadedBuffer*> ZeroAdamW::offloaded_states(size_t unit) const {
  std::vector<OffloadedBuffer*> v = shards_.at(unit).offloaded;
  if (unit < offloaded_moments_.size())
    for (const auto& b : offloaded_moments_[unit]) v.push_back(b.get());
  return v;
}

// [Note: the step unit by unit] Each unit is updated, then its parameters refreshed from the
// master (ZeroPartitioner::refresh_params(i)), while its states are in memory. Offloaded states
// are brought in one unit ahead (the read of unit i + 1 runs while unit i computes) and written
// back behind (unit i's writes run while unit i + 1 computes; the manager settles them after it).
// With an optimizer window (dist/offload/optimizer_window.h) the first units' states were read
// during the backward and are resident: their scopes leave them so, and the manager's window writes
// them under the next forward. Without offload the Resident scopes are empty and this is the plain
// loop.
void ZeroAdamW::set_lr(double lr) {
  ZDL_CHECK(std::isfinite(lr) && lr >= 0, zero_.comm().prefix(), " ZeroAdamW: lr must be a finite number >= 0, got ", lr);
  options_.lr = lr;
}

void ZeroAdamW::step(double grad_scale) {
  optim::check_grad_scale(grad_scale, "ZeroAdamW::step");
  NoGradGuard ng;
  zero_.begin_optimizer_step("ZeroAdamW::step");
  ++step_;
  const size_t n = shards_.size();
  std::unique_ptr<Resident> next = n ? std::make_unique<Resident>(std::vector<OffloadedBuffer*>{}, offloaded_states(0)) : nullptr;
  for (size_t i = 0; i < n; ++i) {
    std::unique_ptr<Resident> here = std::move(next);
    if (i + 1 < n) next = std::make_unique<Resident>(std::vector<OffloadedBuffer*>{}, offloaded_states(i + 1));
    here->wait();
    // A unit no backward reached this step (a branch not taken) keeps its parameters and moments,
    // as plain AdamW skips parameters without a gradient (its decay and momentum moved it).
    if (zero_.unit_has_gradients(i)) update(i, grad_scale);
    zero_.refresh_params(i);
    here.reset();  // evicts unit i (its writes queued)
  }
  zero_.end_optimizer_step();
}

void ZeroAdamW::update(size_t i, double grad_scale) {
  const OptimizerShard& s = shards_[i];
#ifdef ZDL_WITH_CUDA
  if (s.master.device().is_cuda()) {  // not with optimizer offload to cpu: the host updates
    if (device_chunks_.size() != shards_.size()) build_device_tables();
    kernels::cpu::AdamWParams h{options_.lr, options_.beta1, options_.beta2, options_.eps, 0.0, step_};
    const int64_t n = device_chunk_counts_[i];
    if (n == 0) return;
    // Master, moments and gradient shard are indexed alike (see the CPU loop below); decay per chunk.
    kernels::cuda::adamw_update(s.grad.dtype(), static_cast<const kernels::cuda::AdamWChunk*>(device_chunks_[i].raw_data()),
                                n, s.master.data<float>(), s.grad.raw_data(), moments_[i][0].data<float>(),
                                moments_[i][1].data<float>(), h, grad_scale);
    return;
  }
#endif
  const Tensor &m1 = moments_[i][0], &m2 = moments_[i][1];
  for (const Segment& g : s.segments) {
    kernels::cpu::AdamWParams h{options_.lr, options_.beta1, options_.beta2, options_.eps,
                                g.slot->decay ? weight_decay_ : 0.0, step_};
    const int64_t at = g.begin - s.begin, n = g.numel();
    auto run = [&](auto master_tag, auto grad_tag) {
      using T = decltype(master_tag);
      using G = decltype(grad_tag);
      using S = kernels::cpu::opt_state_t<T>;
      kernels::cpu::adamw_update<T, G>(n, s.master.data<T>() + at, s.grad.data<G>() + at, m1.data<S>() + at,
                                       m2.data<S>() + at, h, grad_scale);
    };
    if (s.master.dtype() == DType::F64) run(double{}, double{});
    else if (s.grad.dtype() == DType::BF16) run(float{}, BFloat16{});
    else run(float{}, float{});
  }
}

}  // namespace zdl::dist

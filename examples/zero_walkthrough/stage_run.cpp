#include "examples/zero_walkthrough/stage_run.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "nn/activation_checkpoint.h"

namespace zdl::walkthrough {

using dist::CollectiveKind;
using dist::CommPhase;

namespace {

CatBytes by_cat(const std::array<int64_t, kNumMemoryCategories>& v) {
  auto at = [&](MemoryCategory c) { return v[static_cast<int>(c)]; };
  return {at(MemoryCategory::Parameter) + at(MemoryCategory::ParameterShard),
          at(MemoryCategory::Gradient) + at(MemoryCategory::GradientShard), at(MemoryCategory::OptimizerState),
          at(MemoryCategory::Activation) + at(MemoryCategory::Workspace), at(MemoryCategory::CommBuffer)};
}

CatBytes minus(CatBytes a, const CatBytes& b) {
  for (int i = 0; i < kNumCats; ++i) a[i] -= b[i];
  return a;
}

Traffic read_traffic() {
  Traffic t{};
  for (int k = 0; k < dist::kNumCollectiveKinds; ++k)
    for (int p = 0; p < dist::kNumCommPhases; ++p)
      t[k][p] = dist::comm_ledger().stats(static_cast<CollectiveKind>(k), static_cast<CommPhase>(p));
  return t;
}

// The model's units as the partitioner padded them.
void read_units(dist::ZeroPartitioner& zero, StageRun& r) {
  r.psi = zero.num_parameters();
  r.padded = zero.num_padded();
  r.units = static_cast<int64_t>(zero.units().size());
  for (const dist::ParamUnit* u : zero.units()) {
    if (u->name() == "<root>") r.padded_units.root = u->padded();
    else r.padded_units.blocks.push_back(u->padded());
  }
}

// One micro-batch of batch / N rows per rank and step (no accumulation).
dist::Trainer::BatchFn step_rows(const data::TokenDataset& ds) {
  return [&ds](int64_t step, int64_t first, int64_t count) {
    data::Batch b = ds.step_rows(step, first, count);
    return dist::Trainer::Batch{b.inputs, b.targets};
  };
}

}  // namespace

dist::Trainer Walkthrough::make_trainer(dist::ZeroPartitioner& zero, dist::ZeroAdamW& opt) {
  return dist::Trainer(zero, opt, {.micro_batch = a_.batch / comm_.size(), .grad_clip = a_.grad_clip, .seed = a_.seed});
}

data::TokenDataset Walkthrough::dataset() const {
  return data::TokenDataset(data_path_, {.batch_size = a_.batch, .seq_len = a_.seq, .val_fraction = 0.0,
                                         .seed = a_.seed, .rank = comm_.rank(), .world_size = comm_.size()});
}

std::shared_ptr<nn::GPT> Walkthrough::build_model(dist::ZeroPartitioner& zero, int64_t n_layer, bool checkpointed,
                                                  Mark* mark) {
  std::shared_ptr<nn::GPT> model;
  {
    auto scope = zero.placement_scope(a_.seed);
    model = std::make_shared<nn::GPT>(gpt_config(a_, n_layer));
  }
  nn::checkpoint_every(model->h, checkpointed ? 1 : 0);
  // Markers for the timeline: hooks registered before wrap() run before the manager's, so
  // "forward_hook h.2" is the moment h.2's forward pre-hook starts waiting for its all-gather.
  auto add_markers = [&](nn::Module& m, const std::string& unit) {
    m.register_forward_pre_hook([mark, unit](nn::Module&, const nn::TensorList&) {
      if (*mark) (*mark)("forward_hook", unit);
    });
    m.register_backward_pre_hook([mark, unit](nn::Module&) {
      if (*mark) (*mark)("backward_hook", unit);
    });
  };
  if (mark) {
    for (size_t i = 0; i < model->h.size(); ++i) add_markers(*model->h[i], detail::str("h.", i));
    add_markers(*model, "<root>");
  }
  return model;
}

void Walkthrough::train_step(StageRun& r, dist::ZeroPartitioner& zero, dist::Trainer& trainer,
                             const dist::Trainer::BatchFn& rows, nn::GPT& model, Mark& mark, int64_t step,
                             const MemoryStats& before) {
  const Device cpu = Device::cpu();
  const CatBytes base = by_cat(before.current);
  const bool traced = step + 1 == a_.steps;
  std::chrono::steady_clock::time_point t0;
  // At `at` (the manager's time of the event; a gather's finish is reported after it happened).
  auto sample_at = [&](const std::string& event, const std::string& unit, std::chrono::steady_clock::time_point at) {
    MemoryStats s = memory_ledger().stats(cpu);
    r.trace.push_back({std::chrono::duration<double, std::milli>(at - t0).count(), event, unit,
                       minus(by_cat(s.current), base), s.total_current - before.total_current});
  };
  auto sample = [&](const std::string& event, const std::string& unit) {
    sample_at(event, unit, std::chrono::steady_clock::now());
  };
  memory_ledger().reset_peaks(cpu);
  dist::comm_ledger().reset();
  t0 = std::chrono::steady_clock::now();
  if (traced) {
    zero.set_trace([&](const dist::TraceEvent& ev) {
      if (ev.kind == dist::TraceKind::StepBegin) sample("backward_done", "");  // (and the norm)
      sample_at(dist::trace_kind_name(ev.kind), ev.unit, ev.at);
    });
    mark = sample;
    sample("iteration_begin", "");
  }
  const double loss = trainer.step(step, rows, [&](const Tensor& x, const Tensor& y) {
                                 Tensor l = model.loss(x, y);
                                 if (traced) sample("loss_computed", "");
                                 return l;
                               }).loss;
  if (traced) sample("zero_grad_done", "");
  r.step_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  zero.set_trace(nullptr);
  mark = nullptr;
  r.traffic.push_back(read_traffic());
  MemoryStats s = memory_ledger().stats(cpu);
  r.after = minus(by_cat(s.current), base);
  r.peak = minus(by_cat(s.peak), base);
  r.total_after = s.total_current - before.total_current;
  r.total_peak = s.total_peak - before.total_current;
  r.losses.push_back(loss);
}

StageRun Walkthrough::run_stage(ZeroStage stage, int prefetch, bool checkpointed) {
  StageRun r;
  r.stage = stage;
  r.prefetch = prefetch;
  r.checkpointed = checkpointed;
  const MemoryStats before = memory_ledger().stats(Device::cpu());
  std::shared_ptr<dist::Communicator> shared(&comm_, [](dist::Communicator*) {});
  dist::ZeroPartitioner zero(shared, {.stage = stage, .compute_dtype = dtype_, .prefetch = prefetch});
  Mark mark;
  std::shared_ptr<nn::GPT> model = build_model(zero, a_.n_layer, checkpointed, &mark);
  zero.wrap(*model);
  read_units(zero, r);
  dist::ZeroAdamW opt(zero, {.lr = a_.lr, .beta1 = 0.9, .beta2 = 0.95}, /*weight_decay=*/0.1);
  data::TokenDataset ds = dataset();
  dist::Trainer trainer = make_trainer(zero, opt);
  auto rows = step_rows(ds);
  model->train();
  for (int64_t step = 0; step < a_.steps; ++step) train_step(r, zero, trainer, rows, *model, mark, step, before);
  // Every rank holds the same shard sizes: check that the ledgers agree byte for byte.
  for (int c = 0; c < kNumCats; ++c) {
    auto all = comm_.all_gather_i64(r.after[c]);
    auto allp = comm_.all_gather_i64(r.peak[c]);
    for (size_t i = 0; i < all.size(); ++i)
      if (all[i] != all[0] || allp[i] != allp[0]) r.same_on_all_ranks = false;
  }
  return r;
}

CapProbe Walkthrough::probe(ZeroStage stage, int64_t n_layer, int64_t cap, int64_t steps, bool checkpointed,
                            const dist::OffloadOptions& offload) {
  CapProbe p;
  const Device cpu = Device::cpu();
  memory_ledger().reset_peaks(cpu);
  memory_ledger().set_cap(DeviceType::CPU, cap);
  try {
    std::shared_ptr<dist::Communicator> shared(&comm_, [](dist::Communicator*) {});
    dist::ZeroPartitioner zero(shared,
                               {.stage = stage, .compute_dtype = dtype_, .prefetch = a_.prefetch, .offload = offload});
    std::shared_ptr<nn::GPT> model = build_model(zero, n_layer, checkpointed, /*mark=*/nullptr);
    p.params = static_cast<int64_t>(gpt_config(a_, n_layer).num_parameters());
    zero.wrap(*model);
    dist::ZeroAdamW opt(zero, {.lr = a_.lr, .beta1 = 0.9, .beta2 = 0.95}, 0.1);
    data::TokenDataset ds = dataset();
    dist::Trainer trainer = make_trainer(zero, opt);
    for (int64_t s = 0; s < steps; ++s) {
      const dist::NvmeStore* nvme = zero.nvme_store();
      const int64_t read0 = nvme ? nvme->bytes_read() : 0, written0 = nvme ? nvme->bytes_written() : 0;
      if (nvme) comm_.barrier();  // offload's step times start together (the cost table)
      const auto t0 = std::chrono::steady_clock::now();
      p.losses.push_back(trainer.step(s, step_rows(ds), [&](const Tensor& x, const Tensor& y) {
                                  return model->loss(x, y);
                                }).loss);
      p.step_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      if (nvme) p.disk.emplace_back(nvme->bytes_read() - read0, nvme->bytes_written() - written0);
    }
  } catch (const OutOfMemoryError& e) {
    p.fits = false;
    p.error = e.what();
  }
  memory_ledger().set_cap(DeviceType::CPU, 0);
  p.peak = memory_ledger().stats(cpu).total_peak;
  // Every rank allocates the same sizes in the same order, so all fail at the same allocation.
  auto fails = comm_.all_gather_i64(p.fits ? 0 : 1);
  for (int64_t f : fails) p.all_ranks_agree = p.all_ranks_agree && f == fails[0];
  return p;
}

}  // namespace zdl::walkthrough

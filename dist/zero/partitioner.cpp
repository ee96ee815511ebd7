#include "dist/zero/partitioner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <map>
#include <set>

#include "autograd/engine.h"
#include "autograd/ops.h"
#include "core/hash.h"
#include "kernels/cpu/optim.h"
#include "kernels/cpu/square_sum.h"
#include "optim/param_groups.h"
#ifdef ZDL_WITH_CUDA
#include "kernels/cuda/optim.h"
#endif

namespace zdl::dist {

const char* stage_name(ZeroStage s) {
  switch (s) {
    case ZeroStage::DDP: return "ddp";
    case ZeroStage::One: return "zero1";
    case ZeroStage::Two: return "zero2";
    case ZeroStage::Three: return "zero3";
  }
  return "?";
}

StagePolicy StagePolicy::of(ZeroStage s) {
  switch (s) {
    case ZeroStage::DDP: return {};
    case ZeroStage::One: return {.shard_optimizer = true, .gather_after_step = true};
    case ZeroStage::Two: return {.shard_optimizer = true, .shard_gradients = true, .gather_after_step = true};
    case ZeroStage::Three: return {.shard_optimizer = true, .shard_gradients = true, .shard_parameters = true};
  }
  return {};
}

const char* stage_title(ZeroStage s) {
  switch (s) {
    case ZeroStage::DDP: return "DDP";
    case ZeroStage::One: return "ZeRO-1";
    case ZeroStage::Two: return "ZeRO-2";
    case ZeroStage::Three: return "ZeRO-3";
  }
  return "?";
}

const char* trace_kind_name(TraceKind k) {
  switch (k) {
    case TraceKind::ForwardBegin: return "forward_begin";
    case TraceKind::ForwardEnd: return "forward_end";
    case TraceKind::BackwardBegin: return "backward_begin";
    case TraceKind::BackwardEnd: return "backward_end";
    case TraceKind::GatherIssue: return "gather_issue";
    case TraceKind::GatherDone: return "gather_done";
    case TraceKind::ReduceBegin: return "reduce_begin";
    case TraceKind::ReduceEnd: return "reduce_end";
    case TraceKind::StepBegin: return "step_begin";
    case TraceKind::StepEnd: return "step_end";
  }
  return "?";
}

ZeroStage stage_from_int(int s) {
  ZDL_CHECK(s >= 0 && s <= 3, "ZeRO stage must be 0 (DDP), 1, 2 or 3, got ", s);
  return static_cast<ZeroStage>(s);
}

namespace {

// The collectives the divergence check tells apart (agree()). Three related enums, three
// purposes: CommPhase buckets bytes in the comm ledger (the norm's and the NaN check's
// all-reduces are both "Other" there), TraceKind marks lifecycle points for the timeline
// (compute begin/end too, no collective), and this one names the exact collective a rank
// reached, so a divergence message can say which.
enum Event : int {
  kForwardGather = 1,
  kBackwardGather = 2,
  kGradReduce = 3,
  kPostStepGather = 4,
  kNormReduce = 5,
  kNonFiniteReduce = 6,
};

const char* event_name(int e) {
  switch (e) {
    case kForwardGather: return "the forward all-gather";
    case kBackwardGather: return "the backward all-gather";
    case kGradReduce: return "the gradient reduction";
    case kPostStepGather: return "the post-step all-gather";
    case kNormReduce: return "the gradient-norm all-reduce";
    case kNonFiniteReduce: return "the non-finite-gradient check";
  }
  return "an unknown collective";
}

// The master (optimizer) dtype for a compute dtype: f64 stays f64, everything else is f32.
DType master_dtype(DType compute) { return compute == DType::F64 ? DType::F64 : DType::F32; }

// True when module `name` is one of `prefixes` (or_self) or lies below one of them.
bool is_under(const std::string& name, const std::vector<std::string>& prefixes, bool or_self) {
  return std::any_of(prefixes.begin(), prefixes.end(), [&](const std::string& p) {
    return (or_self && name == p) || name.rfind(p + ".", 0) == 0;
  });
}

Tensor flat_view(const Storage& s, int64_t begin, int64_t n, DType t) {
  return Tensor::from_storage(s, {n}, {1}, begin, t);
}

}  // namespace

// ---- placement ----

// Records each parameter's recipe and hands out a shape-only tensor (released storage):
// wrap() gives it bytes inside its unit.
class ZeroPartitioner::Factory final : public nn::ParameterFactory {
 public:
  explicit Factory(ZeroPartitioner& z) : z_(z) {}
  Tensor create(const nn::ParameterSpec& spec) override {
    ZDL_CHECK(!z_.wrapped_, z_.comm_->prefix(), " parameter '", spec.local_name,
              "' registered after wrap(); build the whole model inside placement_scope() first");
    DType t = z_.options_.compute_dtype;
    auto storage = StorageImpl::make_released(static_cast<size_t>(numel_of(spec.shape)) * element_size(t),
                                              spec.device, MemoryCategory::Parameter);
    storage->set_label(spec.local_name);
    storage->set_release_hint(
        "the model was built inside ZeroPartitioner::placement_scope(), where parameters get no bytes until "
        "zero.wrap(model) places them: call wrap() after building the model, before using it");
    Tensor p = Tensor::from_storage(storage, spec.shape, contiguous_strides(spec.shape), 0, t);
    specs_[p.impl()] = spec;
    return p;
  }
  const nn::ParameterSpec* find(const Tensor& t) const {
    auto it = specs_.find(t.impl());
    return it == specs_.end() ? nullptr : &it->second;
  }

 private:
  ZeroPartitioner& z_;
  std::map<const TensorImpl*, nn::ParameterSpec> specs_;
};

ZeroPartitioner::ZeroPartitioner(std::shared_ptr<Communicator> comm, ZeroOptions options)
    : comm_(std::move(comm)),
      options_(std::move(options)),
      policy_(StagePolicy::of(options_.stage)),
      factory_(std::make_unique<Factory>(*this)) {
  ZDL_CHECK(comm_ != nullptr, "ZeroPartitioner: no communicator");
  DType t = options_.compute_dtype;
  ZDL_CHECK(t == DType::F32 || t == DType::BF16 || t == DType::F64, comm_->prefix(),
            " ZeRO compute dtype must be f32, bf16 or f64, got ", dtype_name(t));
  ZDL_CHECK(options_.prefetch >= 0, comm_->prefix(), " prefetch must be >= 0, got ", options_.prefetch);
  // [Note: device] On a GPU every flat buffer lives on the communicator's device, so the
  // collectives take them directly (NCCL) or stage them through pinned host memory (MPI). The
  // init recipes are evaluated on the host and copied over (bit-identical to a CPU init), and
  // checkpoints read and write through the host; everything else runs as device kernels.
  const Device dev = options_.device;
  if (dev.is_cuda()) {
    ZDL_CHECK(cuda_available(), comm_->prefix(), " ZeRO on ", dev.str(),
              ": no CUDA device is visible (or this zerodl build has no CUDA support)");
    ZDL_CHECK(comm_->device() == dev, comm_->prefix(), " ZeRO on ", dev.str(), " needs a communicator serving ",
              dev.str(), ", but the ", comm_->backend(), " communicator serves ", comm_->device().str(),
              "; create it with dist::init({.device = ", dev.str(), "}) and pass ZeroOptions::device = comm->device()");
    ZDL_CHECK(t == DType::F32 || t == DType::BF16, comm_->prefix(), " ZeRO on ", dev.str(),
              ": compute dtype must be f32 or bf16, got ", dtype_name(t), " (f64 runs on the CPU)");
  }
  ZDL_CHECK(!(options_.no_sync && options_.reduction == GradReduction::Exact), comm_->prefix(),
            " no_sync keeps a running sum of full gradients on each rank, which has no fixed summation tree; "
            "use it with ZeroOptions::reduction = GradReduction::Native");
  if (!options_.is_unit) options_.is_unit = [](const nn::Module& m) { return m.type_name() == "Block"; };
}

int64_t ZeroPartitioner::micro_batch_index(int64_t micro_step) const {
  const int n = comm_->size(), r = comm_->rank();
  if (!exact() || !comm_->has_fixed_order()) return micro_step * n + r;
  int leaf = 0;  // bit_reverse(r) over log2(n) bits
  for (int bit = 1, rev = n >> 1; bit < n; bit <<= 1, rev >>= 1)
    if (r & bit) leaf |= rev;
  return micro_step * n + leaf;
}

ZeroPartitioner::~ZeroPartitioner() = default;

ZeroPartitioner::PlacementScope::PlacementScope(ZeroPartitioner& z, uint64_t seed)
    : factory_(*z.factory_), init_(seed, z.options_.device, z.options_.compute_dtype) {}
ZeroPartitioner::PlacementScope::~PlacementScope() = default;

int64_t ZeroPartitioner::num_parameters() const {
  int64_t n = 0;
  for (auto& u : units_) n += u->numel;
  return n;
}

int64_t ZeroPartitioner::num_padded() const {
  int64_t n = 0;
  for (auto& u : units_) n += u->padded;
  return n;
}

ParamUnit& ZeroPartitioner::make_unit(const std::string& name, const std::vector<std::pair<std::string, Tensor>>& params) {
  auto u = std::make_unique<ParamUnit>();
  u->name = name;
  u->index = static_cast<int>(units_.size());
  const int64_t N = comm_->size();
  for (auto& [pname, p] : params) {
    const nn::ParameterSpec* spec = factory_->find(p);
    ZDL_CHECK(spec != nullptr, comm_->prefix(), " parameter '", pname,
              "' was not created inside placement_scope(): build the model in the scope so the manager places it");
    ParamSlot s;
    s.param = p;
    s.name = pname;
    s.offset = u->numel;
    s.numel = p.numel();
    s.init = spec->init;
    s.seed = spec->seed;
    s.stream = spec->stream;
    s.decay = optim::decays(p);
    u->numel += s.numel;
    u->slots.push_back(s);
  }
  // [Note: padding] Each unit pads to a multiple of N so every rank owns an equal block; the
  // padding (< N elements per unit) is what the memory and traffic checks add to the formulas.
  u->padded = (u->numel + N - 1) / N * N;
  u->shard_size = u->padded / N;
  u->shard_begin = comm_->rank() * u->shard_size;
  units_.push_back(std::move(u));
  return *units_.back();
}

namespace {

// Writes the init values of unit elements [begin, begin + dst.numel()) into dst (contiguous,
// f32, bf16 or f64); padding elements are zero. A device tensor is filled on the host and copied
// over, so its values are the CPU init's bits.
void init_range(const ParamUnit& u, int64_t begin, const Tensor& dst) {
  if (!dst.device().is_cpu()) {
    Tensor host;
    {
      MemoryScope ms(MemoryCategory::Workspace);
      host = Tensor::empty(dst.shape(), dst.dtype());
    }
    init_range(u, begin, host);
    dst.copy_(host);
    return;
  }
  dst.zero_();
  for (const Segment& g : u.segments(begin, begin + dst.numel())) {
    Tensor part = Tensor::from_storage(dst.storage(), {g.numel()}, {1}, dst.offset() + (g.begin - begin), dst.dtype());
    nn::init_elements(g.slot->init, g.slot->seed, g.slot->stream, g.param_begin(), part);
  }
}

}  // namespace

void ZeroPartitioner::allocate(ParamUnit& u) {
  const StagePolicy& pol = policy_;
  const DType ct = options_.compute_dtype, mt = master_dtype(ct);
  const bool separate_master = ct != mt;
  u.separate_master = separate_master;
  const size_t es = element_size(ct);
  const Device dev = options_.device;  // [Note: device]

  // Full parameters: one storage for the unit, released under ZeRO-3 until gathered.
  if (pol.shard_parameters) {
    u.full = StorageImpl::make_released(static_cast<size_t>(u.padded) * es, dev, MemoryCategory::Parameter);
    u.set_initial_param_state(ParamState::Sharded);
  } else {
    MemoryScope ms(MemoryCategory::Parameter);
    u.full = Tensor::empty({u.padded}, ct, dev).storage();
  }
  u.full->set_label("unit " + u.name);
  u.full->set_release_hint(
      "under ZeRO-3 a unit's full parameters exist only during its forward and backward; to read or "
      "write them elsewhere, gather them with `dist::GatheredParameters g(zero);` (collective: all ranks); "
      "to optimize a wrapped model use dist::ZeroAdamW, not optim::AdamW");
  u.full_flat = flat_view(u.full, 0, u.padded, ct);

  // What the optimizer updates, initialized here from the recipes (only this rank's range
  // under stages 1-3 with a separate master, or stage 3).
  if (!pol.shard_optimizer) {
    u.master_begin = 0;
    if (separate_master) {
      MemoryScope ms(MemoryCategory::OptimizerState);
      u.master = Tensor::empty({u.padded}, mt, dev);
      init_range(u, 0, u.master);
      u.full_flat.copy_(u.master);
    } else {
      init_range(u, 0, u.full_flat);
      u.master = u.full_flat;
    }
  } else if (pol.shard_parameters) {
    u.master_begin = u.shard_begin;
    {
      MemoryScope ms(MemoryCategory::ParameterShard);
      u.param_shard = Tensor::empty({u.shard_size}, ct, dev);
    }
    if (separate_master) {
      MemoryScope ms(MemoryCategory::OptimizerState);
      u.master = Tensor::empty({u.shard_size}, mt, dev);
      init_range(u, u.shard_begin, u.master);
      u.param_shard.copy_(u.master);
    } else {
      init_range(u, u.shard_begin, u.param_shard);
      u.master = u.param_shard;
    }
  } else {  // stages 1, 2: every rank holds the full parameters, initialized the same way
    u.master_begin = u.shard_begin;
    Tensor init_full = separate_master ? Tensor::empty({u.padded}, mt) : u.full_flat;  // the former on the host
    init_range(u, 0, init_full);
    if (separate_master) {
      u.full_flat.copy_(init_full);
      MemoryScope ms(MemoryCategory::OptimizerState);
      u.master = Tensor::empty({u.shard_size}, mt, dev);
      u.master.copy_(slice(init_full, 0, u.shard_begin, u.shard_begin + u.shard_size));
    } else {
      u.master = flat_view(u.full, u.shard_begin, u.shard_size, ct);
    }
  }

  // Gradients.
  if (!pol.shard_gradients) {
    MemoryScope ms(MemoryCategory::Gradient);
    u.grad_full = Tensor::zeros({u.padded}, ct, dev).storage();
  } else {
    u.grad_full = StorageImpl::make_released(static_cast<size_t>(u.padded) * es, dev, MemoryCategory::Gradient);
  }
  u.grad_full->set_label("gradients of unit " + u.name);
  u.grad_full->set_release_hint(
      "under ZeRO-2/3 a unit's full gradients exist only between its backward and its reduce-scatter; the "
      "reduced gradients are this rank's shard, which dist::ZeroAdamW steps on (optim::AdamW cannot optimize a "
      "wrapped model)");
  u.grad_flat = flat_view(u.grad_full, 0, u.padded, ct);
  if (!pol.shard_optimizer) {
    u.grad_shard = u.grad_flat;
  } else if (!pol.shard_gradients) {
    u.grad_shard = flat_view(u.grad_full, u.shard_begin, u.shard_size, ct);
  } else {
    MemoryScope ms(MemoryCategory::GradientShard);
    u.grad_shard = Tensor::zeros({u.shard_size}, ct, dev);
  }

  // Re-point every parameter at its place in the unit (same TensorImpl: modules and saved
  // tensors keep working).
  for (ParamSlot& s : u.slots) {
    TensorImpl* impl = s.param.impl();
    impl->storage = u.full;
    impl->offset = s.offset;
    impl->strides = contiguous_strides(impl->shape);
    impl->dtype = ct;
    s.param.set_grad(Tensor());
  }
}

void ZeroPartitioner::wrap(nn::Module& model) {
  ZDL_CHECK(!wrapped_, comm_->prefix(), " wrap() called twice");
  // Units: outermost modules accepted by is_unit, in registration order; the root takes the rest.
  std::set<const TensorImpl*> assigned;
  std::vector<std::string> unit_prefixes;
  for (auto& [name, m] : model.named_modules(/*include_self=*/false)) {
    if (is_under(name, unit_prefixes, false) || !options_.is_unit(*m)) continue;
    std::vector<std::pair<std::string, Tensor>> params;
    for (auto& [pn, p] : m->named_parameters()) {
      ZDL_CHECK(!assigned.count(p.impl()), comm_->prefix(), " parameter '", name, ".", pn,
                "' is shared with another unit; tied parameters must live in one unit");
      assigned.insert(p.impl());
      params.emplace_back(name + "." + pn, p);
    }
    unit_prefixes.push_back(name);
    if (params.empty()) continue;
    ParamUnit& u = make_unit(name, params);
    block_order_.push_back(&u);
    install_hooks(*m, &u);
  }
  std::vector<std::pair<std::string, Tensor>> rest;
  for (auto& [pn, p] : model.named_parameters()) {
    if (assigned.count(p.impl())) continue;
    assigned.insert(p.impl());
    rest.emplace_back(pn, p);
  }
  // Tied weights that cross units would be read while released: refuse them up front.
  for (auto& u : units_)
    for (auto& [name, m] : model.named_modules(false)) {
      if (name.rfind(u->name + ".", 0) == 0 || name == u->name) continue;
      if (is_under(name, unit_prefixes, true)) continue;
      for (auto& [pn, p] : m->local_parameters())
        for (auto& s : u->slots)
          ZDL_CHECK(!s.param.same(p), comm_->prefix(), " parameter '", s.name, "' of unit ", u->name,
                    " is also used by module '", name, "' outside that unit; tied parameters must live in one unit");
    }
  ParamUnit* root = rest.empty() ? nullptr : &make_unit("<root>", rest);
  check_same_units();
  try {
    for (auto& u : units_) allocate(*u);
  } catch (const OutOfMemoryError& e) {
    throw OutOfMemoryError(detail::str(comm_->prefix(), " placing the model's states under ", stage_name(stage()),
                                       " (", num_parameters(), " parameters on ", comm_->size(), " ranks): ", e.what(),
                                       "; shard more (a higher --zero-stage or more ranks) or raise the cap"));
  }
  if (root) install_hooks(model, root);
  // One unit holding everything is rarely meant: usually is_unit matched none of the model's
  // module types. Say so once, with the fix.
  if (block_order_.empty() && policy_.shard_parameters && comm_->rank() == 0 && !model.named_modules(false).empty())
    std::fprintf(stderr,
                 "zerodl: %s wrap(): no module matched ZeroOptions::is_unit (default: modules of type \"Block\"), so "
                 "the whole model is one unit: ZeRO-3 gathers all of it at once. Pass is_unit to name your model's "
                 "blocks (e.g. [](const nn::Module& m) { return m.type_name() == \"MyBlock\"; })\n",
                 comm_->prefix().c_str());
  wrapped_ = true;
  comm_->barrier();
}

// Ranks that built different models (another width, another layer count) would shard
// different buffers under the same collectives and train on garbage without any error: the
// units' names and sizes are compared once, here, and the first difference named.
void ZeroPartitioner::check_same_units() {
  if (comm_->size() == 1) return;
  uint64_t h = kFnv1aOffset;
  for (auto& u : units_) h = fnv1a64(u->name + ":" + std::to_string(u->numel) + ";", h);
  const std::vector<int64_t> all = comm_->all_gather_i64(static_cast<int64_t>(h));
  if (std::all_of(all.begin(), all.end(), [&](int64_t v) { return v == all[0]; })) return;
  const std::vector<int64_t> counts = comm_->all_gather_i64(static_cast<int64_t>(units_.size()));
  const int64_t common = *std::min_element(counts.begin(), counts.end());
  for (int64_t i = 0; i < common; ++i) {
    const ParamUnit& u = *units_[static_cast<size_t>(i)];
    const std::vector<int64_t> sizes = comm_->all_gather_i64(u.numel);
    const std::vector<int64_t> names = comm_->all_gather_i64(static_cast<int64_t>(fnv1a64(u.name)));
    for (size_t r = 0; r < sizes.size(); ++r)
      if (sizes[r] != sizes[0] || names[r] != names[0])
        throw Error(detail::str(comm_->prefix(), " ranks built different models: unit ", i, " ('", u.name, "' here) has ",
                                u.numel, " parameters on this rank, ", sizes[r], " on rank ", r, " (and ", sizes[0],
                                " on rank 0); every rank must build the same model"));
  }
  std::string per_rank;
  for (size_t r = 0; r < counts.size(); ++r) per_rank += detail::str(r ? ", " : "", counts[r]);
  throw Error(detail::str(comm_->prefix(), " ranks built different models: this rank has ", units_.size(),
                          " units, the ranks have ", per_rank, "; every rank must build the same model"));
}

// ---- hooks ----

void ZeroPartitioner::install_hooks(nn::Module& m, ParamUnit* u) {
  m.register_forward_pre_hook([this, u](nn::Module&, const nn::TensorList&) { on_forward_pre(*u); });
  m.register_forward_post_hook(
      [this, u](nn::Module&, const nn::TensorList&, const nn::TensorList&) { on_forward_post(*u); });
  m.register_backward_pre_hook([this, u](nn::Module&) { on_backward_pre(*u); });
  m.register_post_backward_hook([this, u](nn::Module&) { on_post_backward(*u); });
}

namespace {
int position_of(const std::vector<ParamUnit*>& order, const ParamUnit& u) {
  for (size_t i = 0; i < order.size(); ++i)
    if (order[i] == &u) return static_cast<int>(i);
  return -1;  // the root
}
}  // namespace

void ZeroPartitioner::emit(TraceKind kind, const ParamUnit* u) {
  if (!trace_) return;
  double t = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0_).count();
  trace_(TraceEvent{kind, u ? u->name : "", t, memory_ledger().stats(options_.device).total_current});
}

void ZeroPartitioner::gather(ParamUnit& u, CommPhase phase, bool wait) {
  if (u.gathered()) return;
  if (!u.gathering()) {
    agree(phase == CommPhase::ForwardGather ? kForwardGather : kBackwardGather, &u);
    CommPhaseScope ps(phase);
    u.unshard_async(*comm_);
    emit(TraceKind::GatherIssue, &u);
  }
  if (wait) {
    u.wait_unshard();
    emit(TraceKind::GatherDone, &u);
  }
}

void ZeroPartitioner::prefetch(int from, int direction, CommPhase phase) {
  for (int k = 1; k <= options_.prefetch; ++k) {
    int i = from + direction * k;
    if (i < 0 || i >= static_cast<int>(block_order_.size())) break;
    gather(*block_order_[i], phase, /*wait=*/false);
  }
}

void ZeroPartitioner::on_forward_pre(ParamUnit& u) {
  if (policy_.shard_parameters) {
    gather(u, CommPhase::ForwardGather, true);
    // A forward inside the backward is a checkpointed module recomputing the units it contains:
    // the units after it are done with their backward, and a prefetch would leave one gathered.
    int pos = position_of(block_order_, u);
    if (!autograd::in_backward()) prefetch(pos, +1, CommPhase::ForwardGather);  // the root (pos -1): the first block
  }
  emit(TraceKind::ForwardBegin, &u);
}

void ZeroPartitioner::on_forward_post(ParamUnit& u) {
  if (policy_.shard_parameters) u.reshard();
  emit(TraceKind::ForwardEnd, &u);
}

void ZeroPartitioner::on_backward_pre(ParamUnit& u) {
  prepare_grads(u);
  if (policy_.shard_parameters) {
    gather(u, CommPhase::BackwardGather, true);
    int pos = position_of(block_order_, u);
    prefetch(pos < 0 ? static_cast<int>(block_order_.size()) : pos, -1, CommPhase::BackwardGather);
  }
  emit(TraceKind::BackwardBegin, &u);
}

void ZeroPartitioner::on_post_backward(ParamUnit& u) {
  emit(TraceKind::BackwardEnd, &u);
  if (policy_.shard_parameters) {
    u.reshard();  // the reduction reads gradients only
    // Queue the next prefetch before this unit's reduction, so the next unit's pre-hook finds
    // it issued and need not wait (in the divergence check) for the reduction to finish.
    int pos = position_of(block_order_, u);
    if (pos >= 0) prefetch(pos - 1, -1, CommPhase::BackwardGather);
  }
  reduce_grads(u);
}

void ZeroPartitioner::prepare_grads(ParamUnit& u) {
  ZDL_CHECK(u.grad_state != GradState::Reducing, comm_->prefix(), " unit ", u.name,
            ": its backward started while its previous gradients are still being reduced");
  u.grad_state = GradState::Accumulating;
  if (u.grad_full->is_released()) {
    u.grad_full->materialize(MemoryCategory::Gradient);
    u.grad_flat.zero_();
  }
  for (ParamSlot& s : u.slots) {
    Tensor g = s.param.grad();
    if (g.defined() && g.storage() == u.grad_full && g.offset() == s.offset) continue;
    s.param.set_grad(Tensor::from_storage(u.grad_full, s.param.shape(), contiguous_strides(s.param.shape()), s.offset,
                                          options_.compute_dtype));
  }
}

// [Note: overlapped gradient reduction] A unit's gradients are complete when its post-backward
// hook fires, while the backward still has the earlier units to compute. The reduction is
// issued asynchronously (MPI: on the communicator's thread; NCCL: on its stream) and finished
// (waited for, scaled by 1/N, stored into the shard, full gradients freed) when the next unit's
// reduction is issued, so one reduction is in flight while the backward computes the previous
// unit. The gradient buffer under a pending reduction is neither written (the backward is done
// with that unit) nor freed (only wait_for_reductions frees it). A callback queued on the autograd
// engine finishes the last one before backward() returns, so callers see reduced gradients as
// before. Cost: stages 2-3 hold the full gradients of one more unit while it is in flight.
void ZeroPartitioner::reduce_grads(ParamUnit& u) {
  const StagePolicy& pol = policy_;
  // Native reduction sums micro-batches locally where full gradients are kept anyway.
  if (!exact() && !grad_sync_ && (!pol.shard_gradients || (options_.no_sync && !pol.shard_parameters))) return;
  wait_for_reductions();  // at most one in flight
  agree(kGradReduce, &u);
  emit(TraceKind::ReduceBegin, &u);
  CommPhaseScope ps(CommPhase::GradReduce);
  PendingReduce p{&u, nullptr, Tensor(), grad_sync_};
  u.grad_state = GradState::Reducing;
  if (!pol.shard_optimizer) {
    p.work = exact() ? comm_->all_reduce_fixed_async(u.grad_flat) : comm_->all_reduce_async(u.grad_flat);
  } else {
    {
      MemoryScope ms(MemoryCategory::CommBuffer);
      p.reduced = Tensor::empty({u.shard_size}, options_.compute_dtype, options_.device);
    }
    p.work = exact() ? comm_->reduce_scatter_fixed_async(u.grad_flat, p.reduced)
                     : comm_->reduce_scatter_async(u.grad_flat, p.reduced);
  }
  pending_reduce_ = std::move(p);
  // Finished by the next unit's reduction, or at the end of this backward (a no-op by then for
  // all but the last unit's callback; the engine drops the callbacks of a backward that throws).
  // Every reduction queues its own finisher behind itself, so nothing depends on the order of
  // this callback and nn::Module's end-of-backward one (which may fire a post-backward hook and
  // so issue a reduction from inside the callback queue: its finisher is queued after it).
  if (autograd::in_backward()) autograd::queue_callback([this] { wait_for_reductions(); });
  else wait_for_reductions();
}

void ZeroPartitioner::wait_for_reductions() {
  if (!pending_reduce_) return;
  // Taken out first: a wait that throws (watchdog) must not leave it to be finished again.
  PendingReduce p = std::move(*pending_reduce_);
  pending_reduce_.reset();
  ParamUnit& u = *p.unit;
  p.work->wait();
  const double inv_n = 1.0 / comm_->size();
  const StagePolicy& pol = policy_;
  u.grad_state = p.last ? GradState::Reduced : GradState::Accumulating;
  if (exact()) {
    const Tensor& reduced = !pol.shard_optimizer ? u.grad_flat : p.reduced;
    scale_(reduced, inv_n);
    accumulate_exact(u, reduced, p.last);
  } else if (!pol.shard_optimizer) {
    scale_(u.grad_flat, inv_n);
  } else {
    scale_(p.reduced, inv_n);
    if (!pol.shard_gradients) {
      u.grad_shard.copy_(p.reduced);  // own block of the (persistent) full gradients
    } else {
      add_(u.grad_shard, p.reduced);  // micro-batches accumulate into the shard
      u.grad_full->release();
    }
  }
  emit(TraceKind::ReduceEnd, &u);
}

// [Note: pairwise accumulation] Micro-step a's reduced gradient is the sum of N consecutive
// micro-batches (a whole subtree); the micro-steps are summed like a binary counter: a new sum
// at level 0 merges with the newest entry while their levels match, so A micro-steps end as a
// balanced pairwise tree over them (and any A as the same shape one process gives A x N
// micro-batches). The partial sums live in Gradient (stage 0) or GradientShard buffers, at
// most log2(A) of them; a step without accumulation needs none.
void ZeroPartitioner::accumulate_exact(ParamUnit& u, const Tensor& reduced, bool last) {
  const StagePolicy& pol = policy_;
  // Stages 2-3 add into the shard (zero after zero_grad); stage 1's shard is its own block of
  // the full buffer the reduction used as work space, and DDP's result is that buffer itself.
  auto store = [&](const Tensor& v) {
    const Tensor& dest = !pol.shard_optimizer ? u.grad_flat : u.grad_shard;
    if (pol.shard_gradients) add_(dest, v);
    else if (!v.same(dest)) dest.copy_(v);
  };
  if (last && u.grad_partials.empty()) {  // the step's only micro-step
    store(reduced);
  } else {
    Tensor sum;
    {
      MemoryScope ms(!pol.shard_optimizer ? MemoryCategory::Gradient : MemoryCategory::GradientShard);
      sum = Tensor::empty(reduced.shape(), reduced.dtype(), reduced.device());
    }
    sum.copy_(reduced);
    int level = 0;
    auto& parts = u.grad_partials;
    while (!parts.empty() && parts.back().level == level) {  // left operand first: the older sum
      add_(parts.back().sum, sum);
      sum = parts.back().sum;
      parts.pop_back();
      ++level;
    }
    parts.push_back({level, sum});
    if (last) {
      while (parts.size() > 1) {  // A not a power of two: fold the rest newest-first
        ParamUnit::PartialSum top = parts.back();
        parts.pop_back();
        add_(parts.back().sum, top.sum);
      }
      store(parts.back().sum);
      parts.clear();
    }
  }
  if (!pol.shard_gradients) {
    if (!last) u.grad_flat.zero_();  // the next micro-batch's backward starts from zero
  } else {
    u.grad_full->release();
  }
}

// ---- step ----

#ifdef ZDL_WITH_CUDA
namespace {
// Every unit's sum of squares on the device (kernels/cuda/optim.h), copied back with one sync.
std::vector<double> device_sums_of_squares(const std::vector<std::unique_ptr<ParamUnit>>& units, Device dev) {
  const int64_t U = static_cast<int64_t>(units.size());
  int64_t parts = 0;
  for (auto& u : units) parts = std::max(parts, kernels::cuda::sum_squares_partials(u->grad_shard.numel()));
  Tensor ws;  // [parts] partial sums (shared by the units, stream-ordered), then [U] results
  {
    MemoryScope ms(MemoryCategory::Workspace);
    ws = Tensor::empty({parts + U}, DType::F64, dev);
  }
  double* base = static_cast<double*>(ws.raw_data());
  for (int64_t i = 0; i < U; ++i) {
    const Tensor& g = units[static_cast<size_t>(i)]->grad_shard;  // contiguous; padding elements are zero
    kernels::cuda::sum_squares(g.dtype(), g.numel(), g.raw_data(), base, base + parts + i);
  }
  return Tensor::from_storage(ws.storage(), {U}, {1}, parts, DType::F64).to_vector();
}
}  // namespace
#endif

// [Note: exact gradient norm] On the CPU the squares of f32 / bf16 gradients are summed as an
// exact fixed-point integer (kernels/cpu/square_sum.h) and the ranks' integers are summed by
// an all-reduce of their 32-bit digits (exact in doubles), so the norm, and the clip factor,
// have the same bits whatever the world size, stage or thread count. f64 runs and GPU
// buffers sum in double (close, not bit-stable across decompositions).
double ZeroPartitioner::clip_grad_norm(double max_norm) {
  wait_for_reductions();  // normally done when backward() returned
  unit_grad_sq_.assign(units_.size(), 0.0);
  check_gradients_complete("clip_grad_norm");
  const bool sharded = policy_.shard_optimizer && comm_->size() > 1;
  const bool exact_sum = options_.device.is_cpu() && options_.compute_dtype != DType::F64;
  double sq = 0.0;
  if (exact_sum) {
    kernels::cpu::ExactSquareSum total;
    for (size_t i = 0; i < units_.size(); ++i) {
      const Tensor& g = units_[i]->grad_shard;  // contiguous; padding elements are zero
      kernels::cpu::ExactSquareSum s;
      if (g.dtype() == DType::BF16) s.add(g.numel(), g.data<BFloat16>());
      else s.add(g.numel(), g.data<float>());
      unit_grad_sq_[i] = s.value();
      total.merge(s);
    }
    if (sharded) {
      agree(kNormReduce, nullptr);
      total = kernels::cpu::ExactSquareSum::from_words(comm_->all_reduce_sums(total.words()));
    }
    sq = total.value();
  } else {
#ifdef ZDL_WITH_CUDA
    if (options_.device.is_cuda()) unit_grad_sq_ = device_sums_of_squares(units_, options_.device);
#endif
    for (size_t i = 0; i < units_.size(); ++i) {
      const Tensor& g = units_[i]->grad_shard;
      double& s = unit_grad_sq_[i];
      if (g.device().is_cpu()) s = kernels::cpu::sum_squares<double>(g.numel(), g.data<double>());
      sq += s;
    }
    if (sharded) {
      agree(kNormReduce, nullptr);
      sq = comm_->all_reduce_sum(sq);
    }
  }
  last_grad_norm_ = std::sqrt(sq);
  if (max_norm <= 0.0 || !(last_grad_norm_ > max_norm)) return 1.0;
  return max_norm / (last_grad_norm_ + 1e-6);
}

std::vector<ZeroPartitioner::NonFiniteUnit> ZeroPartitioner::nonfinite_grad_units() {
  ZDL_CHECK(unit_grad_sq_.size() == units_.size(), comm_->prefix(),
            " nonfinite_grad_units: call clip_grad_norm first (it measures the gradients)");
  std::vector<double> bad(units_.size());
  for (size_t i = 0; i < units_.size(); ++i) bad[i] = std::isfinite(unit_grad_sq_[i]) ? 0.0 : 1.0;
  const bool replicated = !policy_.shard_optimizer || comm_->size() == 1;
  if (!replicated) {
    agree(kNonFiniteReduce, nullptr);
    bad = comm_->all_reduce_sums(std::move(bad));
  }
  std::vector<NonFiniteUnit> out;
  for (size_t i = 0; i < units_.size(); ++i)
    if (bad[i] > 0) out.push_back({units_[i]->name, replicated ? comm_->size() : static_cast<int>(bad[i])});
  return out;
}

void ZeroPartitioner::after_optimizer_step() {
  refresh_params();
  ++step_;
  emit(TraceKind::StepEnd, nullptr);
}

void ZeroPartitioner::refresh_params() {
  for (auto& up : units_) {
    ParamUnit& u = *up;
    const bool separate = u.separate_master;
    if (!policy_.shard_optimizer) {
      if (separate) u.full_flat.copy_(u.master);
    } else if (policy_.shard_parameters) {
      if (separate) u.param_shard.copy_(u.master);
    } else if (policy_.gather_after_step) {
      Tensor own = flat_view(u.full, u.shard_begin, u.shard_size, options_.compute_dtype);
      if (separate) own.copy_(u.master);
      agree(kPostStepGather, &u);
      CommPhaseScope ps(CommPhase::PostStepGather);
      comm_->all_gather(own, u.full_flat);
    }
  }
}

void ZeroPartitioner::check_gradients_complete(const char* what) const {
  for (auto& u : units_)
    ZDL_CHECK(u->grad_state != GradState::Accumulating && u->grad_state != GradState::Reducing, comm_->prefix(), " ",
              what, ": the gradients of unit ", u->name, " are ", state_name(u->grad_state),
              ", not reduced: the step's last micro-batch must run its backward after set_grad_sync(true)");
}

void ZeroPartitioner::zero_grad() {
  wait_for_reductions();  // no buffer is zeroed or freed under a pending collective
  for (auto& u : units_) {
    u->grad_partials.clear();  // a step abandoned mid-accumulation
    u->grad_state = GradState::Empty;
    if (!policy_.shard_gradients) {
      u->grad_flat.zero_();
    } else {
      u->grad_shard.zero_();
      u->grad_full->release();
    }
  }
  grad_sync_ = true;
}

// ---- divergence ----

void ZeroPartitioner::agree(int event, const ParamUnit* u) {
  if (!options_.check_divergence || comm_->size() == 1) return;
  int64_t tag = (step_ << 24) | (static_cast<int64_t>(event) << 16) | (u ? u->index + 1 : 0);
  std::vector<int64_t> tags = comm_->all_gather_i64(tag);
  if (std::all_of(tags.begin(), tags.end(), [&](int64_t t) { return t == tags[0]; })) return;
  std::string where;
  for (size_t r = 0; r < tags.size(); ++r) where += detail::str(r ? "; " : "", "rank ", r, " is at ", describe(tags[r]));
  throw Error(detail::str(comm_->prefix(), " ranks diverged: ", where,
                          ". Every rank must run the same modules in the same order (same model, same control flow)"));
}

std::string ZeroPartitioner::describe(int64_t tag) const {
  int64_t unit = tag & 0xFFFF, event = (tag >> 16) & 0xFF, step = tag >> 24;
  std::string uname = unit == 0 ? "(no unit)" : unit <= static_cast<int64_t>(units_.size())
                                                    ? "unit '" + units_[unit - 1]->name + "'"
                                                    : "unit #" + std::to_string(unit - 1);
  return detail::str(event_name(static_cast<int>(event)), " of ", uname, " in step ", step + 1);
}

// ---- GatheredParameters ----

namespace {
// FNV-1a of every unit's full parameters (read through the host): a write made inside a
// read-only GatheredParameters changes it.
uint64_t parameters_fingerprint(const std::vector<std::unique_ptr<ParamUnit>>& units) {
  uint64_t h = kFnv1aOffset;
  for (auto& u : units) {
    if (u->full->is_released()) continue;  // a forward inside the scope freed it again
    const Tensor host = u->full_flat.device().is_cpu() ? u->full_flat : u->full_flat.to(Device::cpu());
    h = fnv1a64(host.raw_data(), host.nbytes(), h);
  }
  return h;
}
}  // namespace

GatheredParameters::GatheredParameters(ZeroPartitioner& z, bool modify) : z_(z), modify_(modify) {
  if (z_.policy().shard_parameters)
    for (auto& u : z_.units_) {
      if (u->gathered()) continue;
      z_.gather(*u, CommPhase::Other, true);
      gathered_.push_back(u.get());
    }
  if (!modify_) fingerprint_ = parameters_fingerprint(z_.units_);
}

GatheredParameters::~GatheredParameters() noexcept(false) {
  if (!modify_) {
    const bool written = parameters_fingerprint(z_.units_) != fingerprint_;
    for (ParamUnit* u : gathered_) u->reshard();
    // Not while an exception unwinds the stack: that one is what the caller needs to see.
    if (written && std::uncaught_exceptions() == 0)
      throw Error(z_.comm_->prefix() +
                  " parameters were written inside a read-only dist::GatheredParameters: such writes need not reach "
                  "the masters and shards training uses; write inside GatheredParameters g(zero, /*modify=*/true)");
    return;
  }
  for (auto& u : z_.units_) {
    Tensor own = Tensor::from_storage(u->full, {u->master.numel()}, {1}, u->master_begin, z_.options_.compute_dtype);
    if (z_.policy().shard_parameters) {
      u->master.copy_(own);
      if (u->separate_master) u->param_shard.copy_(u->master);
    } else if (u->separate_master) {
      u->master.copy_(own);
    }
  }
  for (ParamUnit* u : gathered_) u->reshard();
}

}  // namespace zdl::dist

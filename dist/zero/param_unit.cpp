#include "dist/zero/param_unit.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/allocator.h"
#include "dist/zero/quantized_reduce.h"
#include "kernels/cpu/quantize.h"

namespace zdl::dist {

const char* state_name(ParamState s) {
  switch (s) {
    case ParamState::Sharded: return "sharded";
    case ParamState::Unsharding: return "unsharding";
    case ParamState::Unsharded: return "unsharded";
  }
  return "?";
}

const char* state_name(GradState s) {
  switch (s) {
    case GradState::Empty: return "empty";
    case GradState::Accumulating: return "accumulating";
    case GradState::Reducing: return "reducing";
    case GradState::Reduced: return "reduced";
  }
  return "?";
}

const char* state_name(TrainingState s) {
  switch (s) {
    case TrainingState::Idle: return "idle";
    case TrainingState::Forward: return "in forward";
    case TrainingState::PreBackward: return "in backward";
    case TrainingState::PostBackward: return "past its backward";
  }
  return "?";
}

namespace {

// The master (optimizer) dtype for a compute dtype: f64 stays f64, everything else is f32.
DType master_dtype(DType compute) { return compute == DType::F64 ? DType::F64 : DType::F32; }

Tensor flat_view(const Storage& s, int64_t begin, int64_t n, DType t) {
  return Tensor::from_storage(s, {n}, {1}, begin, t);
}

}  // namespace

ParamUnit::ParamUnit(std::string name, int index, std::vector<ParamSlot> slots, const UnitContext& ctx)
    : name_(std::move(name)), index_(index), slots_(std::move(slots)), ctx_(ctx) {
  for (ParamSlot& s : slots_) {
    s.offset = numel_;
    numel_ += s.numel;
  }
  // [Note: padding] Each unit pads to a multiple of N so every rank owns an equal block; the
  // padding (< N elements per unit) is what the memory and traffic checks add to the formulas.
  const int64_t N = ctx_.comm->size();
  padded_ = (numel_ + N - 1) / N * N;
  shard_size_ = padded_ / ctx_.shards->size();
  shard_begin_ = ctx_.shards->rank() * shard_size_;
  const StagePolicy& pol = ctx_.policy;
  local_accumulation_ = !exact() && (!pol.shard_gradients || (ctx_.no_sync && !pol.shard_parameters));
}

ParamUnit::~ParamUnit() {
  try {
    wait_exchange_copies();
  } catch (...) {  // destructors do not throw; the device keeps the error for the next synchronize
  }
}

std::vector<Segment> ParamUnit::segments(int64_t begin, int64_t end) const {
  std::vector<Segment> out;
  for (const ParamSlot& s : slots_) {
    const int64_t lo = std::max(begin, s.offset), hi = std::min(end, s.offset + s.numel);
    if (lo < hi) out.push_back({&s, lo, hi});
  }
  return out;
}

// ---- allocation ----

// Writes the init values of unit elements [begin, begin + dst.numel()) into dst (contiguous,
// f32, bf16 or f64); padding elements are zero. A device tensor is filled on the host and copied
// over, so its values are the CPU init's bits.
void ParamUnit::init_range(int64_t begin, const Tensor& dst) const {
  if (!dst.device().is_cpu()) {
    Tensor host;
    {
      MemoryScope ms(MemoryCategory::Workspace);
      host = Tensor::empty(dst.shape(), dst.dtype());
    }
    init_range(begin, host);
    dst.copy_(host);
    return;
  }
  dst.zero_();
  for (const Segment& g : segments(begin, begin + dst.numel())) {
    Tensor part = Tensor::from_storage(dst.storage(), {g.numel()}, {1}, dst.offset() + (g.begin - begin), dst.dtype());
    nn::init_elements(g.slot->init, g.slot->seed, g.slot->stream, g.param_begin(), part);
  }
}

void ParamUnit::allocate() {
  ZDL_CHECK(!full_, ctx_.comm->prefix(), " unit ", name_, " allocated twice");
  allocate_params();
  allocate_grads();
  // Re-point every parameter at its place in the unit (same TensorImpl: modules and saved
  // tensors keep working).
  for (ParamSlot& s : slots_) {
    TensorImpl* impl = s.param.impl();
    impl->storage = full_;
    impl->offset = s.offset;
    impl->strides = contiguous_strides(impl->shape);
    impl->dtype = ctx_.compute_dtype;
    s.param.set_grad(Tensor());
  }
  place_offloaded();
}

// Written once to the store, then released: from here on the unit brings them in around each use.
void ParamUnit::place_offloaded() {
  const StagePolicy& pol = ctx_.policy;
  if (pol.params_on_nvme) {
    param_shard_.storage()->set_label("parameter shard of unit " + name_);
    shard_off_ = std::make_unique<OffloadedBuffer>(*ctx_.nvme, param_shard_);
  }
  if (pol.optimizer_on_nvme && separate_master_) {
    master_.storage()->set_label("master of unit " + name_);
    master_off_ = std::make_unique<OffloadedBuffer>(*ctx_.nvme, master_);
  }
}

// [Note: host tier] Optimizer offload to cpu on a GPU (ZeRO-Offload): the masters and Adam's
// moments live in host memory and the CPU updates them, so the device keeps only parameters and
// gradients. Per unit, one page-locked host buffer of the master's size in the compute dtype, the
// exchange, carries both ways: the reduced gradient shard goes down into it as soon as the unit's
// last reduction finishes (beside the compute stream, while the backward computes the earlier
// units); after the CPU's update the new master is cast into it (f32 -> compute dtype, on the host)
// and goes up into the device's parameters, while the CPU updates the next unit; the next forward's
// kernels wait for it on the device, not on the host. The master is always a buffer of its own
// (an f32 run's too). The arithmetic is the GPU update's, term for term (kernels/cpu/optim.cpp,
// kernels/cuda/optim.cu, both without contractions), and the casts round alike: the same bits as
// the run without offload. The host never touches the exchange while a copy of it is in flight
// (wait_copy first); the copy stream runs its copies in order.
void ParamUnit::allocate_params() {
  const StagePolicy& pol = ctx_.policy;
  const DType ct = ctx_.compute_dtype, mt = master_dtype(ct);
  separate_master_ = ct != mt || pol.optimizer_on_host;
  const Device dev = ctx_.device;  // [Note: device] in partitioner.cpp
  const Device master_dev = pol.optimizer_on_host ? Device::cpu() : dev;

  // Full parameters: one storage for the unit, released under ZeRO-3 until gathered.
  full_ = flat_storage(pol.shard_parameters, MemoryCategory::Parameter, "unit " + name_,
                       "under ZeRO-3 a unit's full parameters exist only during its forward and backward; to read or "
                       "write them elsewhere, gather them with `dist::GatheredParameters g(zero);` (collective: all "
                       "ranks); to optimize a wrapped model use dist::ZeroAdamW, not optim::AdamW");
  if (pol.shard_parameters) param_state_ = ParamState::Sharded;
  full_flat_ = flat_view(full_, 0, padded_, ct);

  // What the optimizer updates, initialized here from the recipes (only this rank's range
  // under stages 1-3 with a separate master, or stage 3).
  if (!pol.shard_optimizer) {
    master_begin_ = 0;
    if (separate_master_) {
      MemoryScope ms(MemoryCategory::OptimizerState);
      master_ = Tensor::empty({padded_}, mt, master_dev);
      init_range(0, master_);
      full_flat_.copy_(master_);
    } else {
      init_range(0, full_flat_);
      master_ = full_flat_;
    }
  } else if (pol.shard_parameters) {
    master_begin_ = shard_begin_;
    {
      MemoryScope ms(MemoryCategory::ParameterShard);
      param_shard_ = Tensor::empty({shard_size_}, ct, dev);
    }
    if (separate_master_) {
      MemoryScope ms(MemoryCategory::OptimizerState);
      master_ = Tensor::empty({shard_size_}, mt, master_dev);
      init_range(shard_begin_, master_);
      param_shard_.copy_(master_);
    } else {
      init_range(shard_begin_, param_shard_);
      master_ = param_shard_;
    }
  } else {  // stages 1, 2: every rank holds the full parameters, initialized the same way
    master_begin_ = shard_begin_;
    Tensor init_full = separate_master_ ? Tensor::empty({padded_}, mt) : full_flat_;  // the former on the host
    init_range(0, init_full);
    if (separate_master_) {
      full_flat_.copy_(init_full);
      MemoryScope ms(MemoryCategory::OptimizerState);
      master_ = Tensor::empty({shard_size_}, mt, master_dev);
      master_.copy_(slice(init_full, 0, shard_begin_, shard_begin_ + shard_size_));
    } else {
      master_ = own_block_of_full();
    }
  }
  if (pol.optimizer_on_host) {
    MemoryScope ms(MemoryCategory::GradientShard);
    std::optional<PinnedHostScope> pinned;
    if (dev.is_cuda()) pinned.emplace();
    exchange_ = Tensor::empty({master_.numel()}, ct, Device::cpu());  // written before every read
  }
}

void ParamUnit::wait_exchange_copies() {
  wait_copy(std::exchange(grads_down_, nullptr));
  wait_copy(std::exchange(params_up_, nullptr));
}

void ParamUnit::params_from_master(const Tensor& dst) {
  if (!exchange_.defined()) {
    dst.copy_(master_);
    return;
  }
  wait_exchange_copies();  // a load between steps: a download may be in flight
  exchange_.copy_(master_);
  exchange_holds_grads_ = false;
  params_up_ = copy_bytes_async(dst.raw_data(), dst.device(), exchange_.raw_data(), Device::cpu(), dst.nbytes());
}

void ParamUnit::wait_host_grads() {
  wait_copy(std::exchange(grads_down_, nullptr));
  if (!exchange_.defined() || exchange_holds_grads_) return;
  // No download since the last upload (a unit no backward reached, a second step on the same
  // gradients, a checkpoint loaded between backward and step): bring the gradients down now.
  wait_exchange_copies();
  exchange_.copy_(grad_shard_);
  exchange_holds_grads_ = true;
}

void ParamUnit::allocate_grads() {
  const StagePolicy& pol = ctx_.policy;
  const DType ct = ctx_.compute_dtype;
  grad_full_ = flat_storage(pol.shard_gradients, MemoryCategory::Gradient, "gradients of unit " + name_,
                            "under ZeRO-2/3 a unit's full gradients exist only between its backward and its "
                            "reduce-scatter; the reduced gradients are this rank's shard, which dist::ZeroAdamW steps "
                            "on (optim::AdamW cannot optimize a wrapped model)");
  grad_flat_ = flat_view(grad_full_, 0, padded_, ct);
  if (!pol.shard_optimizer) {
    grad_shard_ = grad_flat_;
  } else if (!pol.shard_gradients) {
    grad_shard_ = flat_view(grad_full_, shard_begin_, shard_size_, ct);
  } else {
    MemoryScope ms(MemoryCategory::GradientShard);
    grad_shard_ = Tensor::zeros({shard_size_}, ct, ctx_.device);
  }
}

// A [padded] buffer of the compute dtype: zeroed now, or released until a phase needs it.
Storage ParamUnit::flat_storage(bool released, MemoryCategory category, const std::string& label,
                                const char* release_hint) const {
  Storage s;
  if (released) {
    s = StorageImpl::make_released(static_cast<size_t>(padded_) * element_size(ctx_.compute_dtype), ctx_.device, category);
  } else {
    MemoryScope ms(category);
    s = Tensor::zeros({padded_}, ctx_.compute_dtype, ctx_.device).storage();
  }
  s->set_label(label);
  s->set_release_hint(release_hint);
  return s;
}

Tensor ParamUnit::own_block_of_full() const { return flat_view(full_, shard_begin_, shard_size_, ctx_.compute_dtype); }

// ---- training state ----

void ParamUnit::begin_forward() {
  training_ = TrainingState::Forward;
  unshard(CommPhase::ForwardGather);
  wait_unshard();
}

void ParamUnit::end_forward() {
  training_ = TrainingState::Idle;
  if (ctx_.policy.shard_parameters && held_ == 0) {
    keep_secondary();
    reshard();
  }
}

void ParamUnit::begin_backward() {
  ZDL_CHECK(grad_state_ != GradState::Reducing, ctx_.comm->prefix(), " unit ", name_,
            ": its backward started while its previous gradients are still being reduced");
  training_ = TrainingState::PreBackward;
  // [Note: a second reduction in one step] Stages 0-1 reduce in the full gradient buffer: after
  // a reduction, stage 1's other blocks still hold this rank's own unreduced gradients, which the
  // next reduce-scatter would sum into the other ranks' blocks, and DDP's replicated mean would
  // be summed N times over. So a backward that follows a finished reduction in the same step
  // keeps the reduced result aside, starts from zero, and the next reduction adds it back: the
  // sum stage 2 makes in its shard, with the same bits.
  if (grad_state_ == GradState::Reduced && !ctx_.policy.shard_gradients) {
    {
      MemoryScope ms(MemoryCategory::GradientShard);
      reduced_before_ = grad_shard_.contiguous_copy();
    }
    grad_flat_.zero_();
  }
  grad_state_ = GradState::Accumulating;
  if (grad_full_->is_released()) {
    grad_full_->materialize(MemoryCategory::Gradient);
    grad_flat_.zero_();
  }
  for (ParamSlot& s : slots_) {
    Tensor g = s.param.grad();
    if (g.defined() && g.storage() == grad_full_ && g.offset() == s.offset) continue;
    s.param.set_grad(Tensor::from_storage(grad_full_, s.param.shape(), contiguous_strides(s.param.shape()), s.offset,
                                          ctx_.compute_dtype));
  }
  unshard(CommPhase::BackwardGather);
  wait_unshard();
}

const ParamSlot* ParamUnit::slot_with_stray_gradient() const {
  for (const ParamSlot& s : slots_) {
    const Tensor g = s.param.grad();
    if (g.defined() && g.storage() != grad_full_) return &s;
  }
  return nullptr;
}

void ParamUnit::end_backward() {
  training_ = TrainingState::PostBackward;
  if (ctx_.policy.shard_parameters && held_ == 0) {
    reshard();
    drop_secondary();
  }
}

// ---- parameters ----

void ParamUnit::unshard(CommPhase phase) {
  if (param_state_ != ParamState::Sharded) return;
  ctx_.before_collective(phase, *this);
  CommPhaseScope ps(phase);
  if (shard_off_) {  // the gather's source, from the disk (already on its way after prefetch_shard)
    shard_off_->fetch_async();
    shard_off_->wait();
  }
  full_->materialize(MemoryCategory::Parameter);
  // A gather brings back the values of the shards, which change only in refresh_params (which
  // counts that change): the tensors autograd saved from these parameters must not look changed
  // ([Note: version counter], core/storage.h). The local transport writes through copy_ at once;
  // the others write raw bytes, which do not count.
  const uint64_t version = full_->version();
  ctx_.trace(TraceKind::GatherIssue, *this, std::nullopt);  // before: the gather may finish at once
  if (secondary_.defined()) {
    pending_gather_ = ctx_.node_group->all_gather_async(secondary_, full_flat_);
  } else if (ctx_.quantize_weights && phase != CommPhase::Other) {
    pending_gather_ = quantized_gather();
  } else {
    pending_gather_ = ctx_.shards->all_gather_async(param_shard_, full_flat_);
  }
  full_->set_version(version);
  param_state_ = ParamState::Unsharding;
}

// [Note: quantized gather] ZeRO++'s qwZ: the training gathers move each shard as int8 codes and a
// float scale per block of 256 (kernels/cpu/quantize.h), packed in one int32 buffer per rank
// (kernels::cpu::quantized_record_words), and every rank dequantizes the K records into the full
// parameters: 1 + 4/256 bytes per element instead of s. The master weights are never quantized; the
// forward and backward compute with weights within max|block| / 254 of them (the same values in
// both, as the same shard quantizes to the same codes). GatheredParameters (phase Other) gathers
// exact values.
std::shared_ptr<Work> ParamUnit::quantized_gather() {
  const int64_t S = shard_size_, W = kernels::cpu::quantized_record_words(S), K = ctx_.shards->size();
  {
    MemoryScope ms(MemoryCategory::CommBuffer);
    quant_send_ = Tensor::empty({W}, DType::I32);
    quant_recv_ = Tensor::empty({K * W}, DType::I32);
  }
  kernels::cpu::quantize_record(ctx_.compute_dtype, S, param_shard_.raw_data(), quant_send_.data<int32_t>());
  return ctx_.shards->all_gather_async(quant_send_, quant_recv_);
}

void ParamUnit::dequantize_gathered() {
  const int64_t S = shard_size_, W = kernels::cpu::quantized_record_words(S), K = ctx_.shards->size();
  const int32_t* all = quant_recv_.data<int32_t>();
  const size_t es = element_size(ctx_.compute_dtype);
  for (int64_t k = 0; k < K; ++k)
    kernels::cpu::dequantize_record(ctx_.compute_dtype, S, all + k * W,
                                    static_cast<char*>(full_flat_.raw_data()) + static_cast<size_t>(k * S) * es);
  drop_quantized_buffers();
}

void ParamUnit::drop_quantized_buffers() {
  quant_send_ = Tensor();
  quant_recv_ = Tensor();
}

// [Note: secondary partition] ZeRO++'s hpZ: the forward's gather crossed nodes; its result is
// cut again over the ranks of this node (block l of R for node rank l) and kept until the
// unit's backward, whose gather then stays on the node. The bytes are the gathered parameters',
// so nothing changes but where they come from. Only a forward that a backward will follow keeps
// one (grad mode on, not a recompute inside the backward, which finds it already there).
void ParamUnit::keep_secondary() {
  if (!ctx_.secondary_partition || secondary_.defined() || autograd::in_backward()) return;
  if (!grad_enabled() && !recomputable_forward()) return;  // no backward follows (evaluation)
  const int64_t n = padded_ / ctx_.node_group->size();
  {
    MemoryScope ms(MemoryCategory::ParameterShard);
    secondary_ = Tensor::empty({n}, ctx_.compute_dtype, ctx_.device);
  }
  secondary_.storage()->set_label("secondary partition of unit " + name_);
  secondary_.copy_(flat_view(full_, ctx_.node_group->rank() * n, n, ctx_.compute_dtype));
}

void ParamUnit::drop_secondary() { secondary_ = Tensor(); }

void ParamUnit::wait_unshard() {
  if (param_state_ != ParamState::Unsharding) return;
  pending_gather_->wait();  // a watchdog error leaves the unit Unsharding: its bytes may still arrive
  if (const auto at = pending_gather_->finished_at()) ctx_.trace(TraceKind::GatherFinished, *this, at);
  pending_gather_.reset();
  if (quant_recv_.defined()) dequantize_gathered();
  if (shard_off_) shard_off_->evict();  // read by the gather only; unchanged, so just freed
  param_state_ = ParamState::Unsharded;
  ctx_.trace(TraceKind::GatherDone, *this, std::nullopt);
}

void ParamUnit::reshard() {
  if (param_state_ == ParamState::Unsharding) {
    pending_gather_->wait();
    pending_gather_.reset();
    drop_quantized_buffers();
    if (shard_off_) shard_off_->evict();
  }
  full_->release();
  param_state_ = ParamState::Sharded;
}

void ParamUnit::refresh_params() {
  drop_secondary();  // the parameters change
  // A unit still gathered now holds the old values: one prefetched whose forward did not run (a
  // branch not taken), or gathered again by a late post-backward hook. The next use must gather
  // the updated shards (it computed with the stale ones, and GatheredParameters read them).
  if (ctx_.policy.shard_parameters && param_state_ != ParamState::Sharded) reshard();
  full_->bump_version();  // also where the optimizer wrote them in place, or only the shards
  const StagePolicy& pol = ctx_.policy;
  if (!pol.shard_optimizer) {
    if (separate_master_) {
      Resident r({master_off_.get()});
      r.wait();
      params_from_master(full_flat_);
    }
  } else if (pol.shard_parameters) {
    if (separate_master_) {
      Resident r({master_off_.get()}, {}, {shard_off_.get()});  // the shard is cast whole from the master
      r.wait();
      params_from_master(param_shard_);
    }
  } else if (pol.gather_after_step) {
    Tensor own = own_block_of_full();
    if (separate_master_) {
      Resident r({master_off_.get()});
      r.wait();
      params_from_master(own);
    }
    ctx_.before_collective(CommPhase::PostStepGather, *this);
    CommPhaseScope ps(CommPhase::PostStepGather);
    ctx_.shards->all_gather(own, full_flat_);
  }
}

void ParamUnit::write_back_full() {
  drop_secondary();
  {
    Resident r({}, {}, {master_off_.get(), shard_off_.get()});  // both written whole below
    r.wait();
    Tensor own = Tensor::from_storage(full_, {master_.numel()}, {1}, master_begin_, ctx_.compute_dtype);
    if (ctx_.policy.shard_parameters) {
      master_.copy_(own);
      if (separate_master_) param_shard_.copy_(master_);
    } else if (separate_master_) {
      master_.copy_(own);
    }
  }
  settle_offload();
}

Tensor ParamUnit::full_params() const { return full_->is_released() ? Tensor() : full_flat_; }

void ParamUnit::prefetch_shard() {
  if (shard_off_ && param_state_ == ParamState::Sharded) shard_off_->fetch_async();
}

void ParamUnit::settle_offload() { settle({shard_off_.get(), master_off_.get()}); }

// ---- gradients ----

// [Note: overlapped gradient reduction] A unit's gradients are complete when its post-backward
// hook fires, while the backward still has the earlier units to compute. The reduction is
// issued asynchronously (MPI: on the communicator's thread; NCCL: on its stream) and finished
// (waited for, scaled by 1/N, stored into the shard, full gradients freed) when the next unit's
// reduction is issued, so one reduction is in flight while the backward computes the previous
// unit. The gradient buffer under a pending reduction is neither written (the backward is done
// with that unit) nor freed (only finish_reduce frees it). Cost: stages 2-3 hold the full
// gradients of one more unit while it is in flight. ZeroPartitioner keeps the order.
void ParamUnit::start_reduce(bool last) {
  ZDL_CHECK(!pending_reduce_, ctx_.comm->prefix(), " unit ", name_, ": a reduction was started twice");
  ctx_.before_collective(CommPhase::GradReduce, *this);
  ctx_.trace(TraceKind::ReduceBegin, *this, std::nullopt);
  CommPhaseScope ps(CommPhase::GradReduce);
  auto p = std::make_unique<PendingReduce>();
  p->last = last;
  grad_state_ = GradState::Reducing;
  if (!ctx_.policy.shard_optimizer) {
    Communicator& comm = *ctx_.comm;
    p->work = exact() ? comm.all_reduce_fixed_async(grad_flat_) : comm.all_reduce_async(grad_flat_);
  } else {
    Communicator& comm = *ctx_.shards;
    {
      MemoryScope ms(MemoryCategory::CommBuffer);
      p->reduced = Tensor::empty({shard_size_}, ctx_.compute_dtype, ctx_.device);
    }
    if (ctx_.across_nodes != nullptr)  // qgZ: int8 records in two hops, no fixed tree
      p->work = quantized_reduce_scatter_async(*ctx_.node_group, *ctx_.across_nodes, grad_flat_, p->reduced);
    else
      p->work = exact() ? comm.reduce_scatter_fixed_async(grad_flat_, p->reduced)
                        : comm.reduce_scatter_async(grad_flat_, p->reduced);
  }
  pending_reduce_ = std::move(p);
}

void ParamUnit::finish_reduce() {
  if (!pending_reduce_) return;
  // Taken out first: a wait that throws (watchdog) must not leave it to be finished again.
  std::unique_ptr<PendingReduce> p = std::move(pending_reduce_);
  p->work->wait();
  if (ctx_.replicas != nullptr && p->reduced.defined()) {
    // [Note: hybrid reduction] The group's reduce-scatter summed this shard over the group's
    // ranks; the replicas' all-reduce sums those sums (the fixed tree's upper levels: see
    // ZeroPartitioner::micro_batch_index). It blocks the backward: its bytes are 1/K of the
    // group's reduce-scatter, so its wait is short next to the overlap the reduce-scatter gets.
    ctx_.before_collective(CommPhase::GradReduce, *this);
    CommPhaseScope ps(CommPhase::GradReduce);
    Communicator& rep = *ctx_.replicas;
    (exact() ? rep.all_reduce_fixed_async(p->reduced) : rep.all_reduce_async(p->reduced))->wait();
  }
  // The sum over ranks becomes their mean; alone, x * 1 changes no value: no pass over the bytes.
  auto average = [n = ctx_.comm->size()](const Tensor& t) {
    if (n > 1) scale_(t, 1.0 / n);
  };
  const StagePolicy& pol = ctx_.policy;
  grad_state_ = p->last ? GradState::Reduced : GradState::Accumulating;
  if (exact()) {
    const Tensor& reduced = !pol.shard_optimizer ? grad_flat_ : p->reduced;
    average(reduced);
    accumulate_exact(reduced, p->last);
  } else if (!pol.shard_optimizer) {
    average(grad_flat_);
  } else {
    average(p->reduced);
    if (!pol.shard_gradients) {
      grad_shard_.copy_(p->reduced);  // own block of the (persistent) full gradients
    } else {
      add_(grad_shard_, p->reduced);  // micro-batches accumulate into the shard
      grad_full_->release();
    }
  }
  if (p->last && reduced_before_.defined()) add_(grad_shard_, std::exchange(reduced_before_, Tensor()));
  if (p->last && exchange_.defined()) {  // [Note: host tier]: down while the backward goes on
    grads_down_ = copy_bytes_async(exchange_.raw_data(), Device::cpu(), grad_shard_.raw_data(), grad_shard_.device(),
                                   exchange_.nbytes());
    exchange_holds_grads_ = true;
  }
  ctx_.trace(TraceKind::ReduceEnd, *this, std::nullopt);
}

// Stages 2-3 add into the shard (zero after zero_grad); stage 1's shard is its own block of
// the full buffer the reduction used as work space, and DDP's result is that buffer itself.
void ParamUnit::store_reduced(const Tensor& v) {
  if (ctx_.policy.shard_gradients) add_(grad_shard_, v);
  else if (!v.same(grad_shard_)) grad_shard_.copy_(v);
}

// [Note: pairwise accumulation] Micro-step a's reduced gradient is the sum of N consecutive
// micro-batches (a whole subtree); the micro-steps are summed like a binary counter: a new sum
// at level 0 merges with the newest entry while their levels match, so A micro-steps end as a
// balanced pairwise tree over them (and any A as the same shape one process gives A x N
// micro-batches). The partial sums live in Gradient (stage 0) or GradientShard buffers, at
// most log2(A) of them; a step without accumulation needs none.
void ParamUnit::accumulate_exact(const Tensor& reduced, bool last) {
  const StagePolicy& pol = ctx_.policy;
  if (last && grad_partials_.empty()) {  // the step's only micro-step
    store_reduced(reduced);
  } else {
    Tensor sum;
    {
      MemoryScope ms(!pol.shard_optimizer ? MemoryCategory::Gradient : MemoryCategory::GradientShard);
      sum = Tensor::empty(reduced.shape(), reduced.dtype(), reduced.device());
    }
    sum.copy_(reduced);
    int level = 0;
    auto& parts = grad_partials_;
    while (!parts.empty() && parts.back().level == level) {  // left operand first: the older sum
      add_(parts.back().sum, sum);
      sum = parts.back().sum;
      parts.pop_back();
      ++level;
    }
    parts.push_back({level, sum});
    if (last) {
      while (parts.size() > 1) {  // A not a power of two: fold the rest newest-first
        PartialSum top = parts.back();
        parts.pop_back();
        add_(parts.back().sum, top.sum);
      }
      store_reduced(parts.back().sum);
      parts.clear();
    }
  }
  if (!pol.shard_gradients) {
    if (!last) grad_flat_.zero_();  // the next micro-batch's backward starts from zero
  } else {
    grad_full_->release();
  }
}

void ParamUnit::zero_grad() {
  ZDL_CHECK(!pending_reduce_, ctx_.comm->prefix(), " unit ", name_, ": zero_grad with a reduction in flight");
  drop_secondary();  // a forward no backward followed
  grad_partials_.clear();  // a step abandoned mid-accumulation
  reduced_before_ = Tensor();
  // Host tier: a download in flight must not read the zeroing below (a step skipped), and the
  // exchange no longer mirrors the gradients.
  wait_copy(std::exchange(grads_down_, nullptr));
  exchange_holds_grads_ = false;
  grad_state_ = GradState::Empty;
  training_ = TrainingState::Idle;
  if (!ctx_.policy.shard_gradients) {
    grad_flat_.zero_();
  } else {
    grad_shard_.zero_();
    grad_full_->release();
  }
}

OptimizerShard ParamUnit::optimizer_shard() const {
  const Tensor& grad = exchange_.defined() ? exchange_ : grad_shard_;  // host tier: the host's copy
  OptimizerShard s{master_, grad, master_begin_, segments(master_begin_, master_begin_ + master_.numel()), {}};
  if (master_off_) s.offloaded.push_back(master_off_.get());
  else if (shard_off_ && master_.same(param_shard_)) s.offloaded.push_back(shard_off_.get());  // f32 ZeRO-3
  return s;
}

}  // namespace zdl::dist

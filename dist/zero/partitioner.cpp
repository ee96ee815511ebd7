#include "dist/zero/partitioner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <map>
#include <set>

#include "autograd/engine.h"
#include "core/hash.h"
#include "kernels/cpu/optim.h"
#include "kernels/cpu/square_sum.h"
#include "optim/clip.h"
#include "optim/param_groups.h"
#ifdef ZDL_WITH_CUDA
#include "kernels/cuda/optim.h"
#endif

namespace zdl::dist {
namespace {

// What the divergence check compares (agree()): a unit's collective by its phase in the comm
// ledger, or one of the two whole-model all-reduces that the ledger counts under Other.
constexpr int kNormReduce = kNumCommPhases, kNonFiniteReduce = kNumCommPhases + 1;

const char* event_name(int e) {
  switch (e) {
    case static_cast<int>(CommPhase::ForwardGather): return "the forward all-gather";
    case static_cast<int>(CommPhase::BackwardGather): return "the backward all-gather";
    case static_cast<int>(CommPhase::GradReduce): return "the gradient reduction";
    case static_cast<int>(CommPhase::PostStepGather): return "the post-step all-gather";
    case static_cast<int>(CommPhase::Other): return "the all-gather of GatheredParameters";
    case kNormReduce: return "the gradient-norm all-reduce";
    case kNonFiniteReduce: return "the non-finite-gradient check";
  }
  return "an unknown collective";
}

// True when module `name` is one of `prefixes` (or_self) or lies below one of them, i.e. one of
// its leading dotted parts ("h", "h.3" of "h.3.attn") is in the set: a lookup per part, so wrap()
// stays linear in the model's modules (a scan of every prefix per module took 23 s at 600 blocks).
bool is_under(const std::string& name, const std::set<std::string>& prefixes, bool or_self) {
  if (or_self && prefixes.count(name)) return true;
  for (size_t dot = name.find('.'); dot != std::string::npos; dot = name.find('.', dot + 1))
    if (prefixes.count(name.substr(0, dot))) return true;
  return false;
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
  check_offload_options();
  check_quantization();
  // Ranks given other options (one at ZeRO-3, another at DDP; bf16 against f32) issued other
  // collectives: a hang until the watchdog, or training on a mix of bytes.
  comm_->check_same_on_every_rank(options_signature(), "ZeroOptions");
  make_shard_groups();
  make_node_group();
  if (options_.offload.any_nvme()) nvme_ = std::make_unique<NvmeStore>(options_.offload.dir, comm_->prefix(), options_.offload.direct_io);
  if (!options_.is_unit) options_.is_unit = [](const nn::Module& m) { return m.type_name() == "Block"; };
  context_ = UnitContext{
      .comm = comm_.get(),
      .shards = shards_.get(),
      .replicas = replicas_.get(),
      .node_group = node_group_.get(),
      .secondary_partition = options_.secondary_partition,
      .across_nodes = across_nodes_.get(),
      .quantize_weights = options_.quantize_weights,
      .policy = StagePolicy::of(options_.stage, options_.offload, options_.device),
      .compute_dtype = options_.compute_dtype,
      .device = options_.device,
      .reduction = options_.reduction,
      .no_sync = options_.no_sync,
      .nvme = nvme_.get(),
      .before_collective = [this](CommPhase phase, const ParamUnit& u) { agree(static_cast<int>(phase), &u); },
      .trace = [this](TraceKind kind, const ParamUnit& u, std::optional<std::chrono::steady_clock::time_point> at) {
        emit(kind, &u, at);
      },
  };
}

// What must agree across ranks about the options: everything that decides which collectives run,
// in what order and on how many bytes. (The device's index and the scratch directory may differ.)
std::string ZeroPartitioner::options_signature() const {
  const ZeroOptions& o = options_;
  return detail::str("stage=", stage_name(o.stage), " compute_dtype=", dtype_name(o.compute_dtype),
                     " device=", o.device.is_cpu() ? "cpu" : "cuda", " prefetch=", o.prefetch,
                     " reduction=", o.reduction == GradReduction::Exact ? "exact" : "native", " no_sync=", o.no_sync,
                     " check_divergence=", o.check_divergence, " shard_group=", o.shard_group,
                     " secondary_partition=", o.secondary_partition, " quantize_weights=", o.quantize_weights,
                     " quantize_grads=", o.quantize_grads, " offload.optimizer=", offload_target_name(o.offload.optimizer),
                     " offload.params=", offload_target_name(o.offload.params),
                     " offload.window_bytes=", o.offload.window_bytes);
}

void ZeroPartitioner::check_offload_options() const {
  const OffloadOptions& o = options_.offload;
  const std::string& p = comm_->prefix();
  ZDL_CHECK(o.params != OffloadTarget::Cpu, p, " parameter offload takes none or nvme (parameters already live in ",
            "host memory on CPU ranks)");
  ZDL_CHECK(o.params != OffloadTarget::Nvme || options_.stage == ZeroStage::Three, p,
            " parameter offload moves ZeRO-3's parameter shards, but ", stage_title(options_.stage),
            " keeps every parameter in memory on every rank; use ZeRO-3 (--zero-stage 3)");
  ZDL_CHECK(options_.device.is_cpu() || !o.any_nvme(), p, " NVMe offload runs on CPU ranks in this version of zerodl; on ",
            options_.device.str(), " offload the optimizer to cpu, or use none (docs/offload.md)");
  ZDL_CHECK(!o.any_nvme() || !o.dir.empty(), p, " NVMe offload needs a directory for its scratch files (--offload-dir)");
  ZDL_CHECK(!StagePolicy::of(options_.stage, o, options_.device).optimizer_on_host || options_.compute_dtype != DType::F64,
            p, " optimizer offload to the host takes f32 or bf16 compute (its masters and moments are f32)");
  ZDL_CHECK(o.window_bytes >= 0, p, " the optimizer offload window must be >= 0 bytes, got ", o.window_bytes);
  ZDL_CHECK(o.window_bytes == 0 || o.optimizer == OffloadTarget::Nvme, p,
            " an optimizer offload window (--offload-window-mib) holds optimizer states that live on NVMe; it needs "
            "optimizer offload to nvme (--offload-optimizer nvme)");
}

// [Note: shard groups] Hybrid sharding cuts the N ranks into N / K groups of K consecutive
// ranks (a node's ranks, when K is the ranks per node): each group shards the model states as
// ZeRO does over N, and the groups replicate one another. Two communicators carry it: the group
// (gathers, reduce-scatters, the norm) and the replicas, rank j of every group (the shard's
// all-reduce). Collective: every rank makes both, in the same order.
void ZeroPartitioner::make_shard_groups() {
  const int N = comm_->size(), K = options_.shard_group == 0 ? N : options_.shard_group;
  const std::string& p = comm_->prefix();
  ZDL_CHECK(K >= 1 && N % K == 0, p, " the shard group (--shard-group) must divide the ", N, " ranks, got ",
            options_.shard_group);
  if (K == N) {
    shards_ = comm_;
    return;
  }
  ZDL_CHECK(options_.stage != ZeroStage::DDP, p, " a shard group of ", K, " ranks shards the model states within "
            "groups, but DDP shards nothing; use ZeRO-1, 2 or 3 (--zero-stage) or leave the shard group at all ",
            N, " ranks");
  const int r = comm_->rank();
  shards_ = comm_->split(r / K, r);
  replicas_ = comm_->split(r % K, r);
}

void ZeroPartitioner::check_quantization() const {
  const std::string& p = comm_->prefix();
  if (options_.quantize_grads) {
    ZDL_CHECK(options_.stage != ZeroStage::DDP, p, " quantized gradient reduction (qgZ) replaces ZeRO's reduce-scatter; "
              "DDP all-reduces: use ZeRO-1, 2 or 3");
    ZDL_CHECK(options_.device.is_cpu(), p, " quantized gradient reduction (qgZ) runs on CPU ranks in this version of zerodl");
    ZDL_CHECK(options_.compute_dtype == DType::F32 || options_.compute_dtype == DType::BF16, p,
              " quantized gradient reduction (qgZ) takes f32 or bf16 gradients, got ", dtype_name(options_.compute_dtype));
  }
  if (!options_.quantize_weights) return;
  ZDL_CHECK(options_.stage == ZeroStage::Three, p, " quantized weight gathers (qwZ) quantize ZeRO-3's parameter "
            "gathers; ", stage_title(options_.stage), " gathers none during the step: use ZeRO-3");
  ZDL_CHECK(options_.device.is_cpu(), p, " quantized weight gathers (qwZ) run on CPU ranks in this version of zerodl");
  ZDL_CHECK(options_.compute_dtype == DType::F32 || options_.compute_dtype == DType::BF16, p,
            " quantized weight gathers (qwZ) take f32 or bf16 parameters, got ", dtype_name(options_.compute_dtype));
}

// hpZ's and qgZ's communicators: the group's ranks on this rank's node, and (qgZ) the group's
// ranks with this rank's place on its node, one per node. Collective.
void ZeroPartitioner::make_node_group() {
  const bool hpz = options_.secondary_partition, qgz = options_.quantize_grads;
  if (!hpz && !qgz) return;
  const std::string& p = comm_->prefix();
  const char* what = hpz ? "the secondary partition (hpZ)" : "quantized gradient reduction (qgZ)";
  if (hpz) {
    ZDL_CHECK(options_.stage == ZeroStage::Three, p, " the secondary partition (hpZ) keeps ZeRO-3's gathered "
              "parameters for the backward; ", stage_title(options_.stage), " keeps them all along: use ZeRO-3");
    ZDL_CHECK(options_.offload.params == OffloadTarget::None, p, " the secondary partition (hpZ) with parameter "
              "offload is not supported: use one or the other");
  }
  ZDL_CHECK(shards_->spans_nodes(), p, " ", what, " keeps traffic within a node, but the ", shards_->size(),
            " ranks sharding the states are on one node already",
            comm_->spans_nodes() ? " (the shard group is a node)" : " (to pose the ranks as nodes: --ranks-per-node)");
  node_group_ = shards_->split(shards_->node(), shards_->rank());
  const std::vector<int64_t> sizes = shards_->all_gather_i64(node_group_->size());
  ZDL_CHECK(std::all_of(sizes.begin(), sizes.end(), [&](int64_t n) { return n == sizes[0]; }), p, " ", what,
            " needs the same number of ranks on every node");
  if (qgz) across_nodes_ = shards_->split(node_group_->rank(), shards_->rank());
}

namespace {
int bit_reverse(int r, int n) {  // over log2(n) bits
  int out = 0;
  for (int bit = 1, rev = n >> 1; bit < n; bit <<= 1, rev >>= 1)
    if (r & bit) out |= rev;
  return out;
}
}  // namespace

// The leaf a rank's micro-batch stands for in the fixed reduction tree. Flat: the pairwise tree
// of reduce_scatter_fixed_async over N ranks puts rank r at bit_reverse(r). Hybrid: the group's
// tree (over j = r mod K) sums first, then the replicas' (over g = r / K), so the leaf is
// bit_reverse(j) + K bit_reverse(g): the same balanced tree over N leaves, with the leaves
// assigned to other ranks. One process summing micro-batches pairwise in index order builds it too.
int64_t ZeroPartitioner::micro_batch_index(int64_t micro_step) const {
  const int n = comm_->size(), r = comm_->rank();
  const bool fixed = shards_->has_fixed_order() && (!replicas_ || replicas_->has_fixed_order());
  if (options_.reduction != GradReduction::Exact || !fixed) return micro_step * n + r;
  const int K = shards_->size();
  return micro_step * n + bit_reverse(r % K, K) + K * bit_reverse(r / K, n / K);
}

ZeroPartitioner::~ZeroPartitioner() {
  for (nn::HookHandle& h : hooks_) h.remove();
}

ZeroPartitioner::PlacementScope::PlacementScope(ZeroPartitioner& z, uint64_t seed)
    : factory_(*z.factory_), init_(seed, z.options_.device, z.options_.compute_dtype) {}
ZeroPartitioner::PlacementScope::~PlacementScope() = default;

std::vector<const ParamUnit*> ZeroPartitioner::units() const {
  std::vector<const ParamUnit*> out;
  for (auto& u : units_) out.push_back(u.get());
  return out;
}

int64_t ZeroPartitioner::num_parameters() const {
  int64_t n = 0;
  for (auto& u : units_) n += u->numel();
  return n;
}

int64_t ZeroPartitioner::num_padded() const {
  int64_t n = 0;
  for (auto& u : units_) n += u->padded();
  return n;
}

ParamUnit& ZeroPartitioner::make_unit(const std::string& name, const std::vector<std::pair<std::string, Tensor>>& params) {
  std::vector<ParamSlot> slots;
  for (auto& [pname, p] : params) {
    const nn::ParameterSpec* spec = factory_->find(p);
    ZDL_CHECK(spec != nullptr, comm_->prefix(), " parameter '", pname,
              "' was not created inside placement_scope(): build the model in the scope so the manager places it");
    slots.push_back({.param = p, .name = pname, .numel = p.numel(), .init = spec->init, .seed = spec->seed,
                     // A frozen parameter gets no gradient: without decay its update is zero, as
                     // plain training leaves it (decay moved it a little every step).
                     .stream = spec->stream, .decay = optim::decays(p) && p.requires_grad()});
  }
  units_.push_back(std::make_unique<ParamUnit>(name, static_cast<int>(units_.size()), std::move(slots), context_));
  return *units_.back();
}

void ZeroPartitioner::wrap(nn::Module& model) {
  ZDL_CHECK(!wrapped_, comm_->prefix(), " wrap() called twice");
  // Units: outermost modules accepted by is_unit, in registration order; the root takes the rest.
  std::set<const TensorImpl*> assigned;
  std::set<std::string> unit_prefixes;
  const auto modules = model.named_modules(/*include_self=*/false);
  for (auto& [name, m] : modules) {
    if (is_under(name, unit_prefixes, false) || !options_.is_unit(*m)) continue;
    std::vector<std::pair<std::string, Tensor>> params;
    for (auto& [pn, p] : m->named_parameters()) {
      ZDL_CHECK(!assigned.count(p.impl()), comm_->prefix(), " parameter '", name, ".", pn,
                "' is shared with another unit; tied parameters must live in one unit");
      assigned.insert(p.impl());
      params.emplace_back(name + "." + pn, p);
    }
    unit_prefixes.insert(name);
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
  // Tied weights that cross units would be read while released: refuse them up front. A module
  // outside every unit must use none of the units' parameters.
  std::map<const TensorImpl*, std::pair<const ParamUnit*, const std::string*>> in_unit;
  for (auto& u : units_)
    for (auto& s : u->slots()) in_unit[s.param.impl()] = {u.get(), &s.name};
  for (auto& [name, m] : modules) {
    if (is_under(name, unit_prefixes, true)) continue;
    for (auto& [pn, p] : m->local_parameters()) {
      const auto it = in_unit.find(p.impl());
      if (it != in_unit.end())
        throw Error(detail::str(comm_->prefix(), " parameter '", *it->second.second, "' of unit ",
                                it->second.first->name(), " is also used by module '", name,
                                "' outside that unit; tied parameters must live in one unit"));
    }
  }
  ParamUnit* root = rest.empty() ? nullptr : &make_unit("<root>", rest);
  check_same_units();
  try {
    for (auto& u : units_) u->allocate();
  } catch (const OutOfMemoryError& e) {
    throw OutOfMemoryError(detail::str(comm_->prefix(), " placing the model's states under ", stage_name(stage()),
                                       " (", num_parameters(), " parameters on ", comm_->size(), " ranks): ", e.what(),
                                       "; shard more (a higher --zero-stage or more ranks) or raise the cap"));
  }
  if (root) install_hooks(model, root);
  // One unit holding everything is rarely meant: usually is_unit matched none of the model's
  // module types. Say so once, with the fix.
  if (block_order_.empty() && context_.policy.shard_parameters && comm_->rank() == 0 && !model.named_modules(false).empty())
    std::fprintf(stderr,
                 "zerodl: %s wrap(): no module matched ZeroOptions::is_unit (default: modules of type \"Block\"), so "
                 "the whole model is one unit: ZeRO-3 gathers all of it at once. Pass is_unit to name your model's "
                 "blocks (e.g. [](const nn::Module& m) { return m.type_name() == \"MyBlock\"; })\n",
                 comm_->prefix().c_str());
  wrapped_ = true;
  comm_->barrier();
}

namespace {
// What must agree across ranks about a unit: its name, and each parameter's name, shape and init
// (a [4,8] weight and an [8,4] one have the same count; zeros on one rank and constant(5) on
// another gathered into a mix of the two).
std::vector<std::string> unit_signature(const ParamUnit& u) {
  std::vector<std::string> s;
  for (const ParamSlot& p : u.slots()) s.push_back(p.name + shape_str(p.param.shape()) + " " + p.init.str());
  return s;
}
std::string joined(const std::vector<std::string>& parts) {
  std::string s;
  for (const std::string& p : parts) s += p + ";";
  return s;
}
}  // namespace

// Ranks that built different models (another width, another layer count, another init) would
// shard different buffers under the same collectives and train on garbage without any error:
// the units' signatures are compared once, here, and the first difference named.
void ZeroPartitioner::check_same_units() {
  if (comm_->size() == 1) return;
  uint64_t h = kFnv1aOffset;
  for (auto& u : units_) h = fnv1a64(u->name() + ":" + joined(unit_signature(*u)) + "|", h);
  const std::vector<int64_t> all = comm_->all_gather_i64(static_cast<int64_t>(h));
  if (std::all_of(all.begin(), all.end(), [&](int64_t v) { return v == all[0]; })) return;
  const std::vector<int64_t> counts = comm_->all_gather_i64(static_cast<int64_t>(units_.size()));
  const int64_t common = *std::min_element(counts.begin(), counts.end());
  for (int64_t i = 0; i < common; ++i) {
    const ParamUnit& u = *units_[static_cast<size_t>(i)];
    const std::vector<std::string> parts = unit_signature(u);
    const std::string mine = u.name() + ":" + joined(parts);
    const std::vector<int64_t> sigs = comm_->all_gather_i64(static_cast<int64_t>(fnv1a64(mine)));
    for (size_t r = 1; r < sigs.size(); ++r) {
      if (sigs[r] == sigs[0]) continue;
      // Rank 0's and rank r's unit, parameter by parameter: the first that differs is named.
      const std::string first = comm_->broadcast_string(mine, 0), other = comm_->broadcast_string(mine, static_cast<int>(r));
      auto split = [](const std::string& s) {
        std::vector<std::string> out;
        size_t colon = s.find(':'), at = colon + 1;
        out.push_back(s.substr(0, colon));
        for (size_t semi; (semi = s.find(';', at)) != std::string::npos; at = semi + 1) out.push_back(s.substr(at, semi - at));
        return out;
      };
      const std::vector<std::string> a = split(first), b = split(other);
      size_t k = 0;
      while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
      const std::string on0 = k < a.size() ? a[k] : "(nothing more)", onr = k < b.size() ? b[k] : "(nothing more)";
      throw Error(detail::str(comm_->prefix(), " ranks built different models: in unit ", i, " ('", a[0], "' on rank 0), ",
                              k == 0 ? "the unit is" : "a parameter is", " '", on0, "' on rank 0 and '", onr, "' on rank ",
                              r, "; every rank must build the same model"));
    }
  }
  std::string per_rank;
  for (size_t r = 0; r < counts.size(); ++r) per_rank += detail::str(r ? ", " : "", counts[r]);
  throw Error(detail::str(comm_->prefix(), " ranks built different models: this rank has ", units_.size(),
                          " units, the ranks have ", per_rank, "; every rank must build the same model"));
}

// ---- hooks: each calls the unit's own transition, then orders the units around it ----

void ZeroPartitioner::install_hooks(nn::Module& m, ParamUnit* u) {
  hooks_.push_back(m.register_forward_pre_hook([this, u](nn::Module&, const nn::TensorList&) { on_forward_pre(*u); }));
  hooks_.push_back(m.register_forward_post_hook(
      [this, u](nn::Module&, const nn::TensorList&, const nn::TensorList&) { on_forward_post(*u); }));
  hooks_.push_back(m.register_backward_pre_hook([this, u](nn::Module&) { on_backward_pre(*u); }));
  hooks_.push_back(m.register_post_backward_hook([this, u](nn::Module&) { on_post_backward(*u); }));
}

int ZeroPartitioner::position(const ParamUnit& u) const {
  for (size_t i = 0; i < block_order_.size(); ++i)
    if (block_order_[i] == &u) return static_cast<int>(i);
  return -1;  // the root
}

void ZeroPartitioner::emit(TraceKind kind, const ParamUnit* u, std::optional<std::chrono::steady_clock::time_point> at) {
  if (!trace_) return;
  const auto when = at.value_or(std::chrono::steady_clock::now());
  const double t = std::chrono::duration<double, std::micro>(when - t0_).count();
  trace_(TraceEvent{kind, u ? u->name() : "", t, when, memory_ledger().stats(options_.device).total_current});
}

// Issues the all-gathers of the next `prefetch` blocks in `direction` (no-ops for units that
// are not sharded: every unit under stages 0-2).
void ZeroPartitioner::prefetch(int from, int direction, CommPhase phase) {
  const int n = static_cast<int>(block_order_.size());
  for (int k = 1; k <= options_.prefetch; ++k) {
    int i = from + direction * k;
    if (i < 0 || i >= n) break;
    block_order_[i]->unshard(phase);
  }
  // Parameter offload: the shard read from the disk one unit before its gather is issued.
  const int next = from + direction * (options_.prefetch + 1);
  if (next >= 0 && next < n) block_order_[next]->prefetch_shard();
}

void ZeroPartitioner::on_forward_pre(ParamUnit& u) {
  throw_deferred_error();
  u.begin_forward();
  // A forward inside the engine's backward is a checkpointed module recomputing the units it
  // contains: the units after it are done with their backward, and a prefetch would leave one
  // gathered. The root (position -1) prefetches the first block.
  if (!autograd::in_backward()) prefetch(position(u), +1, CommPhase::ForwardGather);
  emit(TraceKind::ForwardBegin, &u);
}

void ZeroPartitioner::on_forward_post(ParamUnit& u) {
  u.end_forward();
  if (window_) window_->unit_forward_done();
  emit(TraceKind::ForwardEnd, &u);
}

void ZeroPartitioner::on_backward_pre(ParamUnit& u) {
  throw_deferred_error();
  u.begin_backward();
  const int pos = position(u);
  prefetch(pos < 0 ? static_cast<int>(block_order_.size()) : pos, -1, CommPhase::BackwardGather);
  emit(TraceKind::BackwardBegin, &u);
}

void ZeroPartitioner::on_post_backward(ParamUnit& u) {
  emit(TraceKind::BackwardEnd, &u);
  u.end_backward();
  // Queue the next prefetch before this unit's reduction, so the next unit's pre-hook finds
  // it issued and need not wait (in the divergence check) for the reduction to finish.
  if (const int pos = position(u); pos >= 0) prefetch(pos - 1, -1, CommPhase::BackwardGather);
  reduce(u);
  if (window_ && grad_sync_) window_->unit_backward_done();
}

// One reduction in flight ([Note: overlapped gradient reduction] in param_unit.cpp): a unit's
// reduction is finished when the next one is issued, and the last one by a callback queued on
// the autograd engine, so backward() returns with every gradient reduced. Every reduction
// queues its own finisher behind itself, so nothing depends on the order of this callback and
// nn::Module's end-of-backward one (which may fire a post-backward hook and so issue a
// reduction from inside the callback queue: its finisher is queued after it). The engine drops
// the callbacks of a backward that throws.
void ZeroPartitioner::reduce(ParamUnit& u) {
  if (!u.reduces_now(grad_sync_)) return;
  finish_reduction();
  u.start_reduce(grad_sync_);
  reducing_ = &u;
  if (autograd::in_backward()) autograd::queue_callback([this] { finish_reduction(); });
  else finish_reduction();
}

void ZeroPartitioner::finish_reduction() {
  if (ParamUnit* u = std::exchange(reducing_, nullptr)) u->finish_reduce();
}

// ---- step ----

#ifdef ZDL_WITH_CUDA
namespace {
// Every unit's sum of squares on the device (kernels/cuda/optim.h), copied back with one sync.
std::vector<double> device_sums_of_squares(const std::vector<std::unique_ptr<ParamUnit>>& units, Device dev) {
  const int64_t U = static_cast<int64_t>(units.size());
  int64_t parts = 0;
  for (auto& u : units) parts = std::max(parts, kernels::cuda::sum_squares_partials(u->grad_shard().numel()));
  Tensor ws;  // [parts] partial sums (shared by the units, stream-ordered), then [U] results
  {
    MemoryScope ms(MemoryCategory::Workspace);
    ws = Tensor::empty({parts + U}, DType::F64, dev);
  }
  double* base = static_cast<double*>(ws.raw_data());
  for (int64_t i = 0; i < U; ++i) {
    const Tensor& g = units[static_cast<size_t>(i)]->grad_shard();  // contiguous; padding elements are zero
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
  throw_deferred_error();
  finish_reduction();  // normally done when backward() returned
  unit_grad_sq_.assign(units_.size(), 0.0);
  check_gradients_complete("clip_grad_norm");
  const bool sharded = context_.policy.shard_optimizer && shards_->size() > 1;  // replicas hold the same shards
  const bool exact_sum = options_.device.is_cpu() && options_.compute_dtype != DType::F64;
  double sq = 0.0;
  if (exact_sum) {
    kernels::cpu::ExactSquareSum total;
    for (size_t i = 0; i < units_.size(); ++i) {
      const Tensor& g = units_[i]->grad_shard();  // contiguous; padding elements are zero
      kernels::cpu::ExactSquareSum s;
      if (g.dtype() == DType::BF16) s.add(g.numel(), g.data<BFloat16>());
      else s.add(g.numel(), g.data<float>());
      unit_grad_sq_[i] = s.value();
      total.merge(s);
    }
    if (sharded) {
      agree(kNormReduce, nullptr);
      total = kernels::cpu::ExactSquareSum::from_words(shards_->all_reduce_sums(total.words()));
    }
    sq = total.value();
  } else {
#ifdef ZDL_WITH_CUDA
    if (options_.device.is_cuda()) unit_grad_sq_ = device_sums_of_squares(units_, options_.device);
#endif
    for (size_t i = 0; i < units_.size(); ++i) {
      const Tensor& g = units_[i]->grad_shard();
      double& s = unit_grad_sq_[i];
      if (g.device().is_cpu()) s = kernels::cpu::sum_squares<double>(g.numel(), g.data<double>());
      sq += s;
    }
    if (sharded) {
      agree(kNormReduce, nullptr);
      sq = shards_->all_reduce_sum(sq);
    }
  }
  last_grad_norm_ = std::sqrt(sq);
  return optim::clip_scale(last_grad_norm_, max_norm);  // the single-process formula, same bits
}

std::vector<ZeroPartitioner::NonFiniteUnit> ZeroPartitioner::nonfinite_grad_units() {
  ZDL_CHECK(unit_grad_sq_.size() == units_.size(), comm_->prefix(),
            " nonfinite_grad_units: call clip_grad_norm first (it measures the gradients)");
  std::vector<double> bad(units_.size());
  for (size_t i = 0; i < units_.size(); ++i) bad[i] = std::isfinite(unit_grad_sq_[i]) ? 0.0 : 1.0;
  const bool replicated = !context_.policy.shard_optimizer || comm_->size() == 1;
  if (!replicated) {
    agree(kNonFiniteReduce, nullptr);
    bad = comm_->all_reduce_sums(std::move(bad));
  }
  std::vector<NonFiniteUnit> out;
  for (size_t i = 0; i < units_.size(); ++i)
    if (bad[i] > 0) out.push_back({units_[i]->name(), replicated ? comm_->size() : static_cast<int>(bad[i])});
  return out;
}

bool ZeroPartitioner::unit_has_gradients(size_t i) const {
  ZDL_CHECK(i < units_.size(), comm_->prefix(), " unit_has_gradients: unit ", i, " of ", units_.size());
  return units_[i]->grad_state() != GradState::Empty;
}

void ZeroPartitioner::check_gradients_complete(const char* what) const {
  for (auto& u : units_) {
    ZDL_CHECK(u->grad_state() != GradState::Accumulating && u->grad_state() != GradState::Reducing, comm_->prefix(),
              " ", what, ": the gradients of unit ", u->name(), " are ", state_name(u->grad_state()),
              ", not reduced: a unit's gradients are reduced by the step's last micro-batch (its backward after "
              "set_grad_sync(true)); either that backward did not run yet, or it did not reach this unit, which "
              "an earlier micro-batch of the step used (a unit must run in the last micro-batch if it runs in any)");
    // Gradients outside the unit's buffer are never reduced nor read by the optimizer: the
    // module's forward ran without its hooks (module->forward(x) instead of (*module)(x)).
    if (const ParamSlot* s = u->slot_with_stray_gradient())
      throw Error(detail::str(comm_->prefix(), " ", what, ": parameter '", s->name, "' of unit ", u->name(),
                              " got its gradient outside ZeRO's buffer, so it would never be reduced or trained: ",
                              "the module was run without its hooks; call it as (*module)(x), not module->forward(x)"));
  }
}

std::vector<OptimizerShard> ZeroPartitioner::optimizer_shards() const {
  ZDL_CHECK(wrapped_, comm_->prefix(), " the model is not wrapped yet: build the optimizer (ZeroAdamW) after "
            "zero.wrap(model), which lays out the shards it updates");
  std::vector<OptimizerShard> out;
  for (auto& u : units_) out.push_back(u->optimizer_shard());
  return out;
}

void ZeroPartitioner::begin_optimizer_step(const char* what) {
  throw_deferred_error();
  // The scope's gathered copies would go stale under the update (and its end write them back).
  for (auto& u : units_)
    ZDL_CHECK(!u->held(), comm_->prefix(), " ", what, " inside a dist::GatheredParameters scope (unit ", u->name(),
              " is held gathered by it): end the scope (release() or its end of block) before the optimizer step");
  refreshed_ = 0;
  finish_reduction();  // normally done when backward() returned
  check_gradients_complete(what);
  for (auto& u : units_) u->wait_host_grads();  // optimizer offload to cpu: the update reads them on the host
  emit(TraceKind::StepBegin, nullptr);
  if (window_) window_->step_begins();  // a window read still running is the step's wait
}

void ZeroPartitioner::refresh_params(size_t i) {
  ZDL_CHECK(i < units_.size(), comm_->prefix(), " refresh_params: unit ", i, " of ", units_.size());
  units_[i]->refresh_params();
  if (i > 0) settle_unit(i - 1);  // its writes ran while this unit was updated
  ++refreshed_;
}

void ZeroPartitioner::end_optimizer_step() {
  ZDL_CHECK(refreshed_ == units_.size(), comm_->prefix(), " end_optimizer_step: the optimizer refreshed ", refreshed_,
            " of ", units_.size(), " units; call refresh_params(i) for each unit it updated");
  refreshed_ = 0;
  settle_offload();
  if (window_) window_->step_ended();  // the window's writes run under the next forward
  ++step_;
  emit(TraceKind::StepEnd, nullptr);
}

void ZeroPartitioner::refresh_params() {
  for (auto& u : units_) u->refresh_params();
  settle_offload();
}

void ZeroPartitioner::settle_offload() {
  for (size_t i = 0; i < units_.size(); ++i) settle_unit(i);
}

void ZeroPartitioner::settle_unit(size_t i) {
  units_[i]->settle_offload();
  if (i < optimizer_states_.size()) settle(optimizer_states_[i]);
}

void ZeroPartitioner::set_optimizer_states(std::vector<std::vector<OffloadedBuffer*>> per_unit) {
  ZDL_CHECK(per_unit.empty() || per_unit.size() == units_.size(), comm_->prefix(), " set_optimizer_states: ",
            per_unit.size(), " units' states for ", units_.size(), " units");
  window_.reset();
  optimizer_states_ = std::move(per_unit);
  if (optimizer_states_.empty() || options_.offload.window_bytes == 0) return;
  std::vector<OptimizerWindow::Buffers> states;
  for (size_t i = 0; i < units_.size(); ++i) {
    states.push_back(units_[i]->optimizer_shard().offloaded);
    states.back().insert(states.back().end(), optimizer_states_[i].begin(), optimizer_states_[i].end());
  }
  window_ = std::make_unique<OptimizerWindow>(options_.offload.window_bytes, std::move(states));
}

void ZeroPartitioner::zero_grad() {
  finish_reduction();  // no buffer is zeroed or freed under a pending collective
  if (window_) window_->release_unused();
  for (auto& u : units_) u->zero_grad();
  grad_sync_ = true;
}

void ZeroPartitioner::throw_deferred_error() {
  if (deferred_error_.empty()) return;
  throw Error(std::exchange(deferred_error_, std::string()));
}

// ---- divergence ----

void ZeroPartitioner::agree(int event, const ParamUnit* u) {
  if (!options_.check_divergence || comm_->size() == 1) return;
  int64_t tag = (step_ << 24) | (static_cast<int64_t>(event) << 16) | (u ? u->index() + 1 : 0);
  if (u) emit(TraceKind::SyncBegin, u);
  std::vector<int64_t> tags = comm_->all_gather_i64(tag);
  if (u) emit(TraceKind::SyncEnd, u);
  if (std::all_of(tags.begin(), tags.end(), [&](int64_t t) { return t == tags[0]; })) return;
  std::string where;
  for (size_t r = 0; r < tags.size(); ++r) where += detail::str(r ? "; " : "", "rank ", r, " is at ", describe(tags[r]));
  throw Error(detail::str(comm_->prefix(), " ranks diverged: ", where,
                          ". Every rank must run the same modules in the same order (same model, same control flow)"));
}

std::string ZeroPartitioner::describe(int64_t tag) const {
  int64_t unit = tag & 0xFFFF, event = (tag >> 16) & 0xFF, step = tag >> 24;
  std::string uname = unit == 0 ? "(no unit)" : unit <= static_cast<int64_t>(units_.size())
                                                    ? "unit '" + units_[unit - 1]->name() + "'"
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
    const Tensor full = u->full_params();
    if (!full.defined()) continue;  // not gathered (a unit the scope does not hold)
    const Tensor host = full.device().is_cpu() ? full : full.to(Device::cpu());
    h = fnv1a64(host.raw_data(), host.nbytes(), h);
  }
  return h;
}
}  // namespace

GatheredParameters::GatheredParameters(ZeroPartitioner& z, bool modify) : z_(z), modify_(modify) {
  for (auto& u : z_.units_) {
    if (u->param_state() == ParamState::Unsharded) continue;  // every unit under stages 0-2
    u->unshard(CommPhase::Other);
    u->wait_unshard();
    u->hold(true);  // a forward inside the scope (evaluation) leaves them gathered
    gathered_.push_back(u.get());
  }
  if (!modify_) fingerprint_ = parameters_fingerprint(z_.units_);
}

std::string GatheredParameters::end_scope() {
  released_ = true;
  std::string error;
  if (!modify_) {
    if (parameters_fingerprint(z_.units_) != fingerprint_)
      error = z_.comm_->prefix() +
              " parameters were written inside a read-only dist::GatheredParameters: such writes need not reach "
              "the masters and shards training uses; write inside GatheredParameters g(zero, /*modify=*/true)";
  } else {
    for (auto& u : z_.units_) u->write_back_full();
  }
  for (ParamUnit* u : gathered_) {
    u->hold(false);
    u->reshard();
  }
  return error;
}

void GatheredParameters::release() {
  ZDL_CHECK(!released_, z_.comm_->prefix(), " GatheredParameters::release() called twice");
  if (std::string error = end_scope(); !error.empty()) throw Error(error);
}

GatheredParameters::~GatheredParameters() {
  if (released_) return;
  try {
    std::string error = end_scope();
    // Not while an exception unwinds the stack: that one is what the caller needs to see.
    if (error.empty() || std::uncaught_exceptions() > 0) return;
    std::fprintf(stderr, "zerodl: %s (raised at the next training call)\n", error.c_str());
    z_.deferred_error_ = error;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zerodl: ending a GatheredParameters scope failed: %s\n", e.what());
  }
}

}  // namespace zdl::dist

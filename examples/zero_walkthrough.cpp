// zero_walkthrough: the same GPT on the same data under DDP, ZeRO-1, ZeRO-2 and ZeRO-3, with
// every number measured on this machine and printed next to the ZeRO paper's closed form
// (Rajbhandari et al., 2020). docs/walkthrough.md explains each table and picture.
//
//   mpirun -np 4 zero_walkthrough                       # N = 4 CPU ranks (about 15 s on 2 cores)
//   zero_walkthrough                                    # N = 1, no launcher
//   mpirun -np 4 zero_walkthrough --dtype bf16          # mixed precision: the paper's K = 12
//   python3 scripts/plot_walkthrough.py --run build     # N = 1, 2, 4, 8, then the pictures
//
// Per stage it builds a fresh ZeroPartitioner and GPT (same seed, config and batches), trains
// --steps steps, and after every step reads the memory ledger (bytes by category now, and the
// step's peak) and the comm ledger (bytes by collective and phase); the last step is traced
// (every unit event with this rank's memory at that moment). A ZeRO-3 run without prefetch
// shows what the overlap of all-gathers with compute buys. Then the memory-cap experiment: per
// stage, the largest n_layer whose per-rank peak fits under --cap-mib, predicted from three
// small measured runs and confirmed by training under the cap (L* trains, L*+1 runs out of
// memory); DDP's out-of-memory error and ZeRO-3 training that model are printed.
//
// Choices:
// - The checks are exact: model-state bytes after a step and model bytes on the wire per step
//   must equal the closed forms evaluated at the padded size P (each unit padded to a multiple
//   of N; the padding is printed), on every rank. The four stages' losses must be identical
//   (exact reduction sums every gradient in one fixed order whatever the stage; --loss-tol
//   relaxes it).
// - Memory is per rank, from the ledger (docs/design.md, mechanism 2): "param" = full + shard
//   parameters, "grad" = full + shard gradients, "optim" = Adam moments (and the f32 master
//   weights of a bf16 run), "activation" = everything allocated in forward/backward (saved
//   tensors and temporaries), "comm" = reduce-scatter output buffers.
// - Rank 0 prints and writes the CSVs (suffix _n<N>), so runs at several N share one --out.
//
// Exit codes: 0 every check passed, 1 a check failed (or an error), 2 bad flags.
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/default_corpus.h"
#include "data/token_dataset.h"
#include "dist/closed_forms.h"
#include "dist/communicator.h"
#include "dist/trainer.h"
#include "dist/zero.h"
#include "dist/zero_optimizer.h"
#include "io/program_main.h"
#include "nn/activation_checkpoint.h"
#include "nn/gpt.h"

using namespace zdl;
using dist::CollectiveKind;
using dist::CommPhase;
using dist::ZeroStage;

namespace {

struct Args {
  std::string device = "cpu";
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  int64_t seq = 64;
  int64_t batch = 8;
  int64_t steps = 4;
  std::string dtype = "f32";
  double lr = 1e-3;
  double grad_clip = 1.0;
  uint64_t seed = 1337;
  int prefetch = 1;
  bool compare_prefetch = true;
  bool compare_checkpoint = true;
  double cap_mib = 40;
  int64_t fit_max_layers = 128;
  double loss_tol = -1;  // default by dtype
  std::string out = "walkthrough_out";
};

using io::UsageError;

const ZeroStage kStages[] = {ZeroStage::DDP, ZeroStage::One, ZeroStage::Two, ZeroStage::Three};

// ---- what is measured ----

// The walkthrough's byte categories: the ledger's, with full and shard flavours merged.
enum Cat { kParam, kGrad, kOptim, kAct, kComm, kNumCats };
const char* const kCatNames[kNumCats] = {"param", "grad", "optim", "activation", "comm"};
using CatBytes = std::array<int64_t, kNumCats>;

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

// One point of the traced step: an event of the partition manager (or of this program's loop)
// and this rank's memory right then.
struct Sample {
  double t_ms = 0;  // since the step began
  std::string event, unit;
  CatBytes mem{};
  int64_t total = 0;
};

using Traffic = std::array<std::array<dist::CommStats, dist::kNumCommPhases>, dist::kNumCollectiveKinds>;

Traffic read_traffic() {
  Traffic t{};
  for (int k = 0; k < dist::kNumCollectiveKinds; ++k)
    for (int p = 0; p < dist::kNumCommPhases; ++p)
      t[k][p] = dist::comm_ledger().stats(static_cast<CollectiveKind>(k), static_cast<CommPhase>(p));
  return t;
}

struct StageRun {
  ZeroStage stage = ZeroStage::DDP;
  int prefetch = 1;
  bool checkpointed = false;  // every block under activation checkpointing
  int64_t psi = 0, padded = 0, units = 0, largest_unit = 0;
  std::vector<int64_t> block_sizes;  // padded elements of each block, forward order
  int64_t root_size = 0;             // padded elements of the root unit
  CatBytes after{}, peak{};  // after the last step; peak during it (both minus what was there before)
  int64_t total_after = 0, total_peak = 0;
  std::vector<Traffic> traffic;  // per step
  std::vector<double> losses, step_ms;
  std::vector<Sample> trace;     // last step
  bool same_on_all_ranks = true;
};

// ---- the paper's closed forms ----

// Bytes per element: s for parameters and gradients, k for optimizer states (dist/closed_forms.h).
using dist::ElementBytes;

bool sharded(ZeroStage st, Cat c) {
  const dist::StagePolicy pol = dist::StagePolicy::of(st);
  return (c == kOptim && pol.shard_optimizer) || (c == kGrad && pol.shard_gradients) ||
         (c == kParam && pol.shard_parameters);
}

// Model-state bytes per rank after a step for n elements (P or Psi): the paper's formulas.
double state_bytes(ZeroStage st, Cat c, double n, int N, ElementBytes e) {
  double per = c == kParam || c == kGrad ? static_cast<double>(e.s) : c == kOptim ? static_cast<double>(e.k) : 0.0;
  return per * n / (sharded(st, c) ? N : 1);
}

std::string state_formula(ZeroStage st, Cat c, ElementBytes e) {
  if (c != kParam && c != kGrad && c != kOptim) return "-";
  int64_t per = c == kOptim ? e.k : e.s;
  return detail::str(per, "Psi", sharded(st, c) ? "/N" : "");
}

std::string total_formula(ZeroStage st, ElementBytes e) {
  switch (st) {
    case ZeroStage::DDP: return detail::str("(", e.s, "+", e.s, "+", e.k, ")Psi");
    case ZeroStage::One: return detail::str(e.s, "Psi+", e.s, "Psi+", e.k, "Psi/N");
    case ZeroStage::Two: return detail::str(e.s, "Psi+(", e.s, "+", e.k, ")Psi/N");
    case ZeroStage::Three: return detail::str("(", e.s, "+", e.s, "+", e.k, ")Psi/N");
  }
  return "?";
}

// The peak of a category during a step under this implementation's schedule (not the paper's:
// it counts model states only). ZeRO-3 holds the root unit gathered for all of forward and of
// backward, plus the unit at work and the `prefetch` units gathered ahead of it; ZeRO-2/3 hold
// the root's full gradients for the whole backward plus two adjacent blocks' (the one computing
// and the one whose reduce-scatter is in flight, docs/zero.md); the reduce-scatter output is
// one unit's shard. Activations have no closed form here: they are measured only. -1: none.
int64_t peak_closed_form(const StageRun& r, Cat c, int N, ElementBytes e) {
  const int st = static_cast<int>(r.stage);
  const int64_t P = r.padded;
  auto window = [&](size_t blocks) {  // largest sum of `blocks` adjacent block sizes
    const size_t k = std::min(r.block_sizes.size(), blocks);
    int64_t best = 0;
    for (size_t i = 0; i + k <= r.block_sizes.size(); ++i) {
      int64_t sum = 0;
      for (size_t j = i; j < i + k; ++j) sum += r.block_sizes[j];
      best = std::max(best, sum);
    }
    return best;
  };
  switch (c) {
    case kParam: return st < 3 ? e.s * P : e.s * (P / N + r.root_size + window(static_cast<size_t>(r.prefetch) + 1));
    case kGrad: return st < 2 ? e.s * P : e.s * (P / N + r.root_size + window(2));
    case kOptim: return static_cast<int64_t>(state_bytes(r.stage, kOptim, static_cast<double>(P), N, e));
    case kComm: return st == 0 ? 0 : e.s * r.largest_unit / N;
    default: return -1;
  }
}

// ---- formatting ----

std::string commas(int64_t v) {
  std::string d = std::to_string(v < 0 ? -v : v), o;
  for (size_t i = 0; i < d.size(); ++i) {
    if (i > 0 && (d.size() - i) % 3 == 0) o += ',';
    o += d[i];
  }
  return (v < 0 ? "-" : "") + o;
}

std::string mib(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", bytes / (1024.0 * 1024.0));
  return b;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// ---- one training run ----

// The GPT of every run: the flags' shape with `n_layer` blocks (the cap experiment varies it).
nn::GPTConfig gpt_config(const Args& a, int64_t n_layer) {
  return nn::GPTConfig{.vocab_size = 256, .block_size = a.seq, .n_layer = n_layer, .n_head = a.n_head,
                       .n_embd = a.n_embd};
}

class Walkthrough {
 public:
  Walkthrough(const Args& a, dist::Communicator& comm, DType dtype, std::string data_path)
      : a_(a), comm_(comm), dtype_(dtype), data_path_(std::move(data_path)) {}

  // Trains `steps` steps of `stage` on a fresh model; measures everything (see StageRun).
  StageRun run_stage(ZeroStage stage, int prefetch, bool checkpointed = false) {
    StageRun r;
    r.stage = stage;
    r.prefetch = prefetch;
    r.checkpointed = checkpointed;
    const Device cpu = Device::cpu();
    const MemoryStats before = memory_ledger().stats(cpu);
    const CatBytes base = by_cat(before.current);
    std::shared_ptr<dist::Communicator> shared(&comm_, [](dist::Communicator*) {});
    dist::ZeroPartitioner zero(shared, {.stage = stage, .compute_dtype = dtype_, .prefetch = prefetch});
    std::shared_ptr<nn::GPT> model;
    {
      auto scope = zero.placement_scope(a_.seed);
      model = std::make_shared<nn::GPT>(gpt_config(a_, a_.n_layer));
    }
    nn::checkpoint_every(model->h, checkpointed ? 1 : 0);
    // Markers for the timeline: hooks registered before wrap() run before the manager's, so
    // "forward_hook h.2" is the moment h.2's forward pre-hook starts waiting for its all-gather.
    std::function<void(const std::string&, const std::string&)> mark;
    auto add_markers = [&](nn::Module& m, const std::string& unit) {
      m.register_forward_pre_hook([&mark, unit](nn::Module&, const nn::TensorList&) {
        if (mark) mark("forward_hook", unit);
      });
      m.register_backward_pre_hook([&mark, unit](nn::Module&) {
        if (mark) mark("backward_hook", unit);
      });
    };
    for (size_t i = 0; i < model->h.size(); ++i) add_markers(*model->h[i], detail::str("h.", i));
    add_markers(*model, "<root>");
    zero.wrap(*model);
    r.psi = zero.num_parameters();
    r.padded = zero.num_padded();
    r.units = static_cast<int64_t>(zero.units().size());
    for (auto& u : zero.units()) {
      r.largest_unit = std::max(r.largest_unit, u->padded);
      if (u->name == "<root>") r.root_size = u->padded;
      else r.block_sizes.push_back(u->padded);
    }
    dist::ZeroAdamW opt(zero, {.lr = a_.lr, .beta1 = 0.9, .beta2 = 0.95}, /*weight_decay=*/0.1);
    data::TokenDataset ds(data_path_, {.batch_size = a_.batch, .seq_len = a_.seq, .val_fraction = 0.0, .seed = a_.seed,
                                       .rank = comm_.rank(), .world_size = comm_.size()});
    dist::Trainer trainer = make_trainer(zero, opt);
    auto rows = step_rows(ds);
    model->train();
    for (int64_t step = 0; step < a_.steps; ++step) {
      const bool traced = step + 1 == a_.steps;
      double loss_value = 0;
      std::chrono::steady_clock::time_point t0;
      auto sample = [&](const std::string& event, const std::string& unit) {
        MemoryStats s = memory_ledger().stats(cpu);
        r.trace.push_back({std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(),
                           event, unit, minus(by_cat(s.current), base), s.total_current - before.total_current});
      };
      {
        memory_ledger().reset_peaks(cpu);
        dist::comm_ledger().reset();
        t0 = std::chrono::steady_clock::now();
        if (traced) {
          zero.set_trace([&](const dist::TraceEvent& ev) {
            if (ev.kind == dist::TraceKind::StepBegin) sample("backward_done", "");  // (and the norm)
            sample(dist::trace_kind_name(ev.kind), ev.unit);
          });
          mark = sample;
          sample("iteration_begin", "");
        }
        loss_value = trainer.step(step, rows, [&](const Tensor& x, const Tensor& y) {
                               Tensor loss = model->loss(x, y);
                               if (traced) sample("loss_computed", "");
                               return loss;
                             }).loss;
        if (traced) sample("zero_grad_done", "");
        r.step_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        zero.set_trace(nullptr);
        mark = nullptr;
      }
      r.traffic.push_back(read_traffic());
      MemoryStats s = memory_ledger().stats(cpu);
      r.after = minus(by_cat(s.current), base);
      r.peak = minus(by_cat(s.peak), base);
      r.total_after = s.total_current - before.total_current;
      r.total_peak = s.total_peak - before.total_current;
      r.losses.push_back(loss_value);
    }
    // Every rank holds the same shard sizes: check that the ledgers agree byte for byte.
    for (int c = 0; c < kNumCats; ++c) {
      auto all = comm_.all_gather_i64(r.after[c]);
      auto allp = comm_.all_gather_i64(r.peak[c]);
      for (size_t i = 0; i < all.size(); ++i)
        if (all[i] != all[0] || allp[i] != allp[0]) r.same_on_all_ranks = false;
    }
    return r;
  }

  // The memory-cap experiment for one model size: trains `steps` steps of an n_layer model
  // under a cap on this rank's total bytes (0 = none). fits = no rank ran out of memory.
  struct CapProbe {
    bool fits = true;
    bool all_ranks_agree = true;  // every rank failed, or none
    int64_t params = 0;
    int64_t peak = 0;  // total bytes on this rank, at the step's peak (absolute, as the cap sees it)
    std::string error;
    std::vector<double> losses;
  };

  CapProbe probe(ZeroStage stage, int64_t n_layer, int64_t cap, int64_t steps, bool checkpointed) {
    CapProbe p;
    const Device cpu = Device::cpu();
    memory_ledger().reset_peaks(cpu);
    memory_ledger().set_cap(DeviceType::CPU, cap);
    try {
      std::shared_ptr<dist::Communicator> shared(&comm_, [](dist::Communicator*) {});
      dist::ZeroPartitioner zero(shared, {.stage = stage, .compute_dtype = dtype_, .prefetch = a_.prefetch});
      std::shared_ptr<nn::GPT> model;
      {
        auto scope = zero.placement_scope(a_.seed);
        model = std::make_shared<nn::GPT>(gpt_config(a_, n_layer));
      }
      nn::checkpoint_every(model->h, checkpointed ? 1 : 0);
      p.params = static_cast<int64_t>(gpt_config(a_, n_layer).num_parameters());
      zero.wrap(*model);
      dist::ZeroAdamW opt(zero, {.lr = a_.lr, .beta1 = 0.9, .beta2 = 0.95}, 0.1);
      data::TokenDataset ds(data_path_, {.batch_size = a_.batch, .seq_len = a_.seq, .val_fraction = 0.0,
                                         .seed = a_.seed, .rank = comm_.rank(), .world_size = comm_.size()});
      dist::Trainer trainer = make_trainer(zero, opt);
      for (int64_t s = 0; s < steps; ++s)
        p.losses.push_back(trainer.step(s, step_rows(ds), [&](const Tensor& x, const Tensor& y) {
                                    return model->loss(x, y);
                                  }).loss);
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

 private:
  // One micro-batch of batch / N rows per rank and step (no accumulation).
  dist::Trainer make_trainer(dist::ZeroPartitioner& zero, dist::ZeroAdamW& opt) {
    return dist::Trainer(zero, opt,
                         {.micro_batch = a_.batch / comm_.size(), .grad_clip = a_.grad_clip, .seed = a_.seed});
  }
  static dist::Trainer::BatchFn step_rows(const data::TokenDataset& ds) {
    return [&ds](int64_t step, int64_t first, int64_t count) {
      data::Batch b = ds.step_rows(step, first, count);
      return dist::Trainer::Batch{b.inputs, b.targets};
    };
  }

  const Args& a_;
  dist::Communicator& comm_;
  DType dtype_;
  std::string data_path_;
};

// ---- CSV ----

class Csv {
 public:
  Csv(const std::string& path, const std::string& header, bool active) {
    if (!active) return;
    out_.open(path);
    if (!out_) throw UsageError("cannot write '" + path + "'");
    out_ << std::setprecision(17) << header << "\n";
  }
  template <class... T>
  void row(const T&... v) {
    if (!out_.is_open()) return;
    int i = 0;
    ((out_ << (i++ ? "," : "") << v), ...);
    out_ << "\n";
  }

 private:
  std::ofstream out_;
};

// ---- the report ----

// What every table shares. Rank 0 prints and writes the CSVs; every rank runs every check and
// keeps the failed ones, which rank 0 prints at the end.
struct Report {
  bool lead = false;
  int N = 1;
  DType dtype = DType::F32;
  ElementBytes eb{};
  std::string out;  // --out
  std::vector<std::string> failures;

  void say(const std::string& m) const {
    if (lead) std::printf("%s\n", m.c_str());
  }
  void fail(const std::string& m) { failures.push_back(m); }
  // "_n<N>.csv": runs at several N share one --out.
  std::string suffix() const { return detail::str("_n", N, ".csv"); }
  std::string path(const char* name) const {
    return (std::filesystem::path(out) / (std::string(name) + suffix())).string();
  }
  Csv csv(const char* name, const std::string& header) const { return Csv(path(name), header, lead); }
};

// Input checks (exit 2); returns the dtype.
DType check_args(const Args& a, int N) {
  if (a.device != "cpu") {
    if (a.device == "cuda")
      throw UsageError(
          "--device cuda: the walkthrough measures CPU runs only (its closed forms are checked against the CPU's "
          "memory ledger). Run it with --device cpu; train on GPUs with train_gpt --device cuda (docs/cuda.md)");
    throw UsageError("--device must be cpu or cuda, got '" + a.device + "'");
  }
  DType dtype;
  try {
    dtype = dtype_from_name(a.dtype);
  } catch (const Error& e) {
    throw UsageError(std::string("--dtype: ") + e.what());
  }
  if (dtype != DType::F32 && dtype != DType::BF16) throw UsageError("--dtype must be f32 or bf16, got " + a.dtype);
  if (a.batch % N != 0)
    throw UsageError(detail::str("--batch ", a.batch, " must be divisible by the number of ranks ", N));
  try {
    gpt_config(a, a.n_layer).validate();
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  return dtype;
}

// Trains the four stages, then ZeRO-3 without prefetch ([3]'s comparison) unless --no-prefetch-compare or --prefetch 0.
std::vector<StageRun> run_stages(const Args& a, Walkthrough& w, const Report& rep) {
  std::vector<StageRun> runs;
  for (ZeroStage st : kStages) {
    auto t = std::chrono::steady_clock::now();
    runs.push_back(w.run_stage(st, a.prefetch));
    if (rep.lead)
      std::printf("  ran %-6s: %lld steps in %.1f s\n", dist::stage_title(st), static_cast<long long>(a.steps),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
  }
  if (a.compare_prefetch && a.prefetch > 0) runs.push_back(w.run_stage(ZeroStage::Three, 0));
  return runs;
}

// Psi, the padded P and the element bytes s, K of every closed form: checks Psi against GPT-2's parameter count.
void print_sizes(Report& rep, const Args& a, const StageRun& r) {
  const int64_t psi = r.psi, P = r.padded, units = r.units;
  const auto gpt2 = static_cast<int64_t>(gpt_config(a, a.n_layer).num_parameters());
  if (psi != gpt2) rep.fail(detail::str("the model has ", psi, " parameters, the GPT-2 count says ", gpt2));
  rep.say(detail::str("\nPsi = ", commas(psi), " parameters in ", units, " units (", units - 1,
                      " blocks + the root: embeddings, final norm); padded to multiples of N: P = ", commas(P), " (+",
                      P - psi, " elements)"));
  rep.say(detail::str("element bytes: parameters and gradients s = ", rep.eb.s, " (", dtype_name(rep.dtype),
                      "), optimizer states K = ", rep.eb.k,
                      rep.dtype == DType::BF16 ? " (f32 master 4 + Adam m 4 + v 4: the paper's mixed precision)"
                                               : " (Adam m 4 + v 4; the f32 parameters are their own master)"));
}

// [1] Memory per rank by category, after a step and at its peak: checks the paper's state_bytes and peak_closed_form.
void print_memory_table(Report& rep, std::span<const StageRun> stages) {
  const int N = rep.N;
  const ElementBytes eb = rep.eb;
  const int64_t psi = stages[0].psi, P = stages[0].padded;  // the same model in every stage
  rep.say("\n[1] Memory per rank (bytes). 'after' = after the last step (model states stay, the rest is freed);");
  rep.say("    'formula' = the paper's closed form at Psi, 'pad' = what the padding to P adds, 'peak' = highest");
  rep.say("    during the step (per category), 'schedule' = its closed form for this implementation's unit schedule");
  rep.say("    (ZeRO-3: root + the working unit + the prefetched one; activations are measured only).");
  rep.say(detail::str("    ", std::string(118, '-')));
  if (rep.lead)
    std::printf("    %-7s %-10s %14s  %-18s %14s %8s  %-4s %14s %14s %-3s\n", "stage", "category", "after", "formula",
                "= bytes", "+ pad", "ok", "peak", "schedule", "ok");
  Csv mem_csv =
      rep.csv("memory", "n,dtype,stage,category,after,peak,closed_form,paper,formula,peak_closed_form,psi,padded");
  for (auto& r : stages) {
    int64_t tot_want = 0;
    double tot_paper = 0;
    for (int c = 0; c < kNumCats; ++c) {
      Cat cat = static_cast<Cat>(c);
      double paper = state_bytes(r.stage, cat, static_cast<double>(psi), N, eb);
      int64_t want = static_cast<int64_t>(state_bytes(r.stage, cat, static_cast<double>(P), N, eb));
      bool ok = r.after[c] == want;
      if (!ok)
        rep.fail(detail::str(dist::stage_title(r.stage), " ", kCatNames[c], ": measured ", r.after[c],
                             " bytes after the step, ", "closed form ", want));
      tot_want += want;
      tot_paper += paper;
      const int64_t want_peak = peak_closed_form(r, cat, N, eb);
      const bool peak_ok = want_peak < 0 || r.peak[c] == want_peak;
      if (!peak_ok)
        rep.fail(detail::str(dist::stage_title(r.stage), " ", kCatNames[c], ": measured peak ", r.peak[c],
                             " bytes, schedule's closed form ", want_peak));
      if (rep.lead)
        std::printf("    %-7s %-10s %14s  %-18s %14s %8s  %-4s %14s %14s %-3s\n", dist::stage_title(r.stage),
                    kCatNames[c], commas(r.after[c]).c_str(), state_formula(r.stage, cat, eb).c_str(),
                    commas(static_cast<int64_t>(std::llround(paper))).c_str(),
                    commas(want - static_cast<int64_t>(std::llround(paper))).c_str(), ok ? "yes" : "NO",
                    commas(r.peak[c]).c_str(), want_peak < 0 ? "-" : commas(want_peak).c_str(),
                    want_peak < 0 ? "" : peak_ok ? "yes" : "NO");
      mem_csv.row(N, dtype_name(rep.dtype), dist::stage_name(r.stage), kCatNames[c], r.after[c], r.peak[c], want, paper,
                  state_formula(r.stage, cat, eb), want_peak, psi, P);
    }
    if (rep.lead)
      std::printf("    %-7s %-10s %14s  %-18s %14s %8s  %-4s %14s  (%s MiB after, %s MiB peak)\n", "",
                  "total", commas(r.total_after).c_str(), total_formula(r.stage, eb).c_str(),
                  commas(static_cast<int64_t>(std::llround(tot_paper))).c_str(),
                  commas(tot_want - static_cast<int64_t>(std::llround(tot_paper))).c_str(),
                  r.total_after == tot_want ? "yes" : "NO", commas(r.total_peak).c_str(), mib(r.total_after).c_str(),
                  mib(r.total_peak).c_str());
    mem_csv.row(N, dtype_name(rep.dtype), dist::stage_name(r.stage), "total", r.total_after, r.total_peak, tot_want,
                tot_paper, total_formula(r.stage, eb), -1, psi, P);
    if (r.total_after != tot_want)
      rep.fail(detail::str(dist::stage_title(r.stage), ": ", r.total_after,
                           " bytes remain after the step, closed form ", tot_want,
                           " (something besides the model states stayed allocated)"));
    if (!r.same_on_all_ranks) rep.fail(detail::str(dist::stage_title(r.stage), ": ranks measured different memory"));
  }
  if (rep.lead) {
    const auto& d = stages[0];
    std::printf("    model states vs DDP:");
    for (auto& r : stages)
      std::printf("  %s %.2fx", dist::stage_title(r.stage),
                  static_cast<double>(d.after[kParam] + d.after[kGrad] + d.after[kOptim]) /
                      static_cast<double>(r.after[kParam] + r.after[kGrad] + r.after[kOptim]));
    std::printf("   (the paper at N=%d: DDP 1x, ZeRO-1 %.2fx, ZeRO-2 %.2fx, ZeRO-3 %.2fx)\n", N,
                double(2 * eb.s + eb.k) / (2 * eb.s + double(eb.k) / N),
                double(2 * eb.s + eb.k) / (eb.s + double(eb.s + eb.k) / N), double(N));
  }
}

// [2] Bytes per rank per step by collective and phase: checks dist::traffic_closed_form, and no collective beyond it.
void print_traffic_table(Report& rep, std::span<const StageRun> stages) {
  const int N = rep.N;
  const ElementBytes eb = rep.eb;
  const int64_t P = stages[0].padded, units = stages[0].units;  // the same model in every stage
  rep.say("\n[2] Bytes per rank per step by collective and phase (every step; the last one shown).");
  rep.say("    payload = the collective's full buffer; wire = what this rank sends on a ring.");
  rep.say(detail::str("    ", std::string(118, '-')));
  if (rep.lead)
    std::printf("    %-7s %-32s %5s %14s %14s %14s  %-17s %-3s\n", "stage", "collective / phase", "calls", "payload",
                "wire", "= closed form", "formula", "ok");
  Csv traffic_csv = rep.csv(
      "traffic", "n,dtype,stage,collective,phase,calls,payload,wire,closed_calls,closed_payload,closed_wire,formula");
  for (auto& r : stages) {
    auto want = dist::traffic_closed_form(r.stage, P, units, N, eb);
    int64_t model_wire = 0;
    for (size_t s = 0; s < r.traffic.size(); ++s) {
      const Traffic& t = r.traffic[s];
      int64_t counted_calls = 0, all_calls = 0;
      for (auto& w2 : want) {
        const auto& got = t[static_cast<int>(w2.kind)][static_cast<int>(w2.phase)];
        counted_calls += got.calls;
        bool ok = got.calls == w2.calls && got.payload_bytes == w2.payload && got.wire_bytes == w2.wire;
        if (!ok)
          rep.fail(detail::str(dist::stage_title(r.stage), " step ", s + 1, " ", dist::collective_name(w2.kind), "/",
                               dist::phase_name(w2.phase), ": measured ", got.calls, " calls, ", got.payload_bytes,
                               " B payload, ", got.wire_bytes, " B wire; closed form ", w2.calls, ", ", w2.payload,
                               ", ", w2.wire));
        if (s + 1 == r.traffic.size()) {
          if (w2.phase != CommPhase::Other) model_wire += got.wire_bytes;
          std::string label = detail::str(dist::collective_name(w2.kind), " / ", dist::phase_name(w2.phase));
          if (rep.lead)
            std::printf("    %-7s %-32s %5lld %14s %14s %14s  %-17s %-3s\n", dist::stage_title(r.stage), label.c_str(),
                        static_cast<long long>(got.calls), commas(got.payload_bytes).c_str(),
                        commas(got.wire_bytes).c_str(), commas(w2.wire).c_str(), w2.formula.c_str(), ok ? "yes" : "NO");
          traffic_csv.row(N, dtype_name(rep.dtype), dist::stage_name(r.stage), dist::collective_name(w2.kind),
                          dist::phase_name(w2.phase), got.calls, got.payload_bytes, got.wire_bytes, w2.calls,
                          w2.payload, w2.wire, w2.formula);
        }
      }
      for (auto& kind : t)  // the step's loss, shared for the report, is no model traffic
        for (int ph = 0; ph < dist::kNumCommPhases; ++ph)
          if (static_cast<CommPhase>(ph) != CommPhase::Metrics) all_calls += kind[static_cast<size_t>(ph)].calls;
      if (all_calls != counted_calls)
        rep.fail(detail::str(dist::stage_title(r.stage), " step ", s + 1, ": ", all_calls - counted_calls,
                             " collectives beyond the closed form"));
    }
    if (rep.lead) {
      int k = r.stage == ZeroStage::Three ? 3 : 2;
      double unit = static_cast<double>(eb.s * P) * (N - 1) / N;
      std::printf("    %-7s model bytes on the wire: %s = %s x s P (N-1)/N   (paper: %d Psi)\n", "",
                  commas(model_wire).c_str(), N > 1 ? detail::str(model_wire / unit).c_str() : "-", k);
    }
  }
}

// The median of the steps after the first (of the only one if there is one).
double median_step_ms(const StageRun& r) {
  return median(std::vector<double>(r.step_ms.begin() + (r.step_ms.size() > 1), r.step_ms.end()));
}

// ZeRO-3's time blocked on all-gathers in the traced step: from a unit's pre-hook (our marker,
// which runs just before the manager's) to the end of the wait for that unit's parameters.
double blocked_ms(const StageRun& r) {
  double b = 0, entered = -1;
  for (const Sample& x : r.trace) {
    if (x.event == "forward_hook" || x.event == "backward_hook") entered = x.t_ms;
    if (x.event == "gather_done" && entered >= 0) b += x.t_ms - entered;
    if (x.event == "forward_begin" || x.event == "backward_begin") entered = -1;
  }
  return b;
}

// [3] Step time and losses, ZeRO-3 with and without prefetch: checks every run's losses equal DDP's (up to --loss-tol).
void print_step_table(Report& rep, const Args& a, std::span<const StageRun> runs, double loss_tol) {
  rep.say("\n[3] Step time (median of the steps after the first) and losses (mean over ranks).");
  rep.say(detail::str("    ", std::string(118, '-')));
  Csv steps_csv = rep.csv("steps", "n,dtype,stage,prefetch,step,loss,ms");
  const StageRun& ddp = runs[0];
  const double ddp_ms = median_step_ms(ddp);
  for (auto& r : runs) {
    double m = median_step_ms(r);
    std::string name = dist::stage_title(r.stage);
    if (r.stage == ZeroStage::Three) name += detail::str(" (prefetch ", r.prefetch, ")");
    if (rep.lead) {
      std::printf("    %-20s %8.1f ms  %6.2fx DDP  %8.0f tokens/s  losses", name.c_str(), m, m / ddp_ms,
                  static_cast<double>(a.batch * a.seq) / (m / 1000.0));
      for (double l : r.losses) std::printf(" %.6f", l);
      if (r.stage == ZeroStage::Three)
        std::printf("   (blocked on all-gathers %.1f ms of the traced step's %.1f ms)", blocked_ms(r),
                    r.step_ms.back());
      std::printf("\n");
    }
    for (size_t s = 0; s < r.losses.size(); ++s)
      steps_csv.row(rep.N, dtype_name(rep.dtype), dist::stage_name(r.stage), r.prefetch, s + 1, r.losses[s],
                    r.step_ms[s]);
  }
  double worst = 0;
  for (auto& r : runs)
    for (size_t s = 0; s < r.losses.size(); ++s)
      worst = std::max(worst, std::abs(r.losses[s] - ddp.losses[s]) / std::abs(ddp.losses[s]));
  const char* verdict =
      worst == 0 ? "the stages' losses are identical" : worst <= loss_tol ? "the stages agree" : "DISAGREE";
  rep.say(detail::str("    largest relative loss difference from DDP: ", worst, " (tolerance ", loss_tol, ") -> ",
                      verdict));
  if (!(worst <= loss_tol)) rep.fail(detail::str("losses differ across stages by ", worst, " > ", loss_tol));
}

// The traced step of every run, event by event with this rank's memory (the pictures' data): CSV only, no check.
void write_trace_csv(const Report& rep, std::span<const StageRun> runs) {
  Csv trace_csv = rep.csv("trace", "n,dtype,stage,prefetch,seq,t_ms,event,unit,param,grad,optim,activation,comm,total");
  for (auto& r : runs)
    for (size_t i = 0; i < r.trace.size(); ++i) {
      const Sample& s = r.trace[i];
      trace_csv.row(rep.N, dtype_name(rep.dtype), dist::stage_name(r.stage), r.prefetch, i, s.t_ms, s.event,
                    s.unit == "<root>" ? "root" : s.unit, s.mem[kParam], s.mem[kGrad], s.mem[kOptim], s.mem[kAct],
                    s.mem[kComm], s.total);
    }
}

// Activation bytes (with workspace) on this rank when the traced step's loss was computed: what
// the forward keeps for the backward, besides the model states.
int64_t kept_after_forward(const StageRun& r) {
  for (const Sample& x : r.trace)
    if (x.event == "loss_computed") return x.mem[kAct];
  return -1;
}

// [5] Every block checkpointed, per stage, next to the same stage without: identical losses and
// traffic (under ZeRO-3 the recompute runs inside the backward gather window), the activations
// the forward keeps smaller by the closed form (f32), the activation peak, and the step's cost.
void print_checkpoint_table(Report& rep, const Args& a, std::span<const StageRun> plain, std::span<const StageRun> ckpt) {
  const dist::BlockActivations form =
      dist::block_activation_bytes(a.batch / rep.N, a.seq, a.n_embd, a.n_head, rep.eb.s);
  const bool has_form = rep.dtype == DType::F32;  // bf16 on the CPU computes through f32 copies
  const int64_t saved_form = a.n_layer * (form.kept - form.checkpointed);
  rep.say("\n[5] Activation checkpointing of every block (ZeRO-R's recompute): the forward keeps each block's input");
  rep.say("    only; the backward recomputes the block, then differentiates it. 'kept' = activations alive when the");
  rep.say(detail::str("    loss is computed; closed form of what checkpointing saves: L (16 C + NH + 4) (B/N) T s", has_form ? "" : " (f32 only)"));
  rep.say("    (dist::block_activation_bytes). Losses and bytes on the wire must equal the run without.");
  rep.say(detail::str("    ", std::string(118, '-')));
  if (rep.lead)
    std::printf("    %-7s %12s %12s %12s %12s %-3s %12s %12s %9s %9s %6s  %-6s %-7s\n", "stage", "kept", "kept ckpt",
                "saved", "closed form", "ok", "act peak", "peak ckpt", "step ms", "ckpt ms", "cost", "losses",
                "traffic");
  Csv csv = rep.csv("checkpoint", "n,dtype,stage,checkpoint,kept_after_forward,activation_peak,total_peak,step_ms,saved_closed_form");
  for (size_t i = 0; i < plain.size() && i < ckpt.size(); ++i) {
    const StageRun &p = plain[i], &c = ckpt[i];
    const int64_t kp = kept_after_forward(p), kc = kept_after_forward(c);
    const bool form_ok = !has_form || kp - kc == saved_form;
    if (!form_ok)
      rep.fail(detail::str(dist::stage_title(p.stage), " checkpointed: the forward kept ", kp - kc,
                           " fewer activation bytes, closed form ", saved_form));
    const bool same_losses = p.losses == c.losses;
    if (!same_losses) rep.fail(detail::str(dist::stage_title(p.stage), " checkpointed: losses differ from the run without"));
    bool same_traffic = p.traffic.size() == c.traffic.size();
    for (size_t s = 0; same_traffic && s < p.traffic.size(); ++s)
      for (int k = 0; k < dist::kNumCollectiveKinds; ++k)
        for (int ph = 0; ph < dist::kNumCommPhases; ++ph) {
          const auto &x = p.traffic[s][k][ph], &y = c.traffic[s][k][ph];
          if (static_cast<CommPhase>(ph) != CommPhase::Metrics && (x.calls != y.calls || x.payload_bytes != y.payload_bytes))
            same_traffic = false;
        }
    if (!same_traffic)
      rep.fail(detail::str(dist::stage_title(p.stage), " checkpointed: collectives differ from the run without"));
    const double pm = median_step_ms(p), cm = median_step_ms(c);
    if (rep.lead)
      std::printf("    %-7s %12s %12s %12s %12s %-3s %12s %12s %9.1f %9.1f %5.2fx  %-6s %-7s\n", dist::stage_title(p.stage),
                  commas(kp).c_str(), commas(kc).c_str(), commas(kp - kc).c_str(),
                  has_form ? commas(saved_form).c_str() : "-", has_form ? (form_ok ? "yes" : "NO") : "", commas(p.peak[kAct]).c_str(),
                  commas(c.peak[kAct]).c_str(), pm, cm, cm / pm, same_losses ? "same" : "DIFFER",
                  same_traffic ? "same" : "DIFFERS");
    for (const StageRun* r : {&p, &c})
      csv.row(rep.N, dtype_name(rep.dtype), dist::stage_name(r->stage), r->checkpointed ? 1 : 0, kept_after_forward(*r),
              r->peak[kAct], r->total_peak, median_step_ms(*r), has_form ? saved_form : -1);
  }
}

// One stage's search for the largest n_layer under the cap.
struct CapFit {
  std::array<int64_t, 3> peaks{};  // uncapped 1-step peaks at L = 2, 3, 4
  int64_t predicted = 0;           // L* from peak(L) = a + b L
  int64_t layers = 0;              // L* measured: trains under the cap (0: not even L = 1)
  Walkthrough::CapProbe at;        // the run at L* (or where the walk down stopped, if nothing trained)
};

// Predicts L* from three uncapped runs (the slope of the last two: at small L the peak can sit in
// another phase of the step, the head's), then walks from it under the cap: down until a size
// trains, up until the next one runs out of memory (the peak is not exactly affine).
CapFit fit_under_cap(Report& rep, const Args& a, Walkthrough& w, ZeroStage st, bool ckpt, int64_t cap, Csv& fit_csv) {
  CapFit f;
  for (int i = 0; i < 3; ++i) {
    auto p = w.probe(st, 2 + i, 0, 1, ckpt);
    f.peaks[i] = p.peak;
    fit_csv.row(rep.N, dtype_name(rep.dtype), dist::stage_name(st), ckpt ? 1 : 0, cap, 2 + i, p.params, p.peak,
                p.peak <= cap ? 1 : 0, "uncapped");
  }
  const int64_t b = std::max<int64_t>(f.peaks[2] - f.peaks[1], 1);
  int64_t L = f.peaks[2] <= cap ? 4 + (cap - f.peaks[2]) / b : f.peaks[0] <= cap ? 2 : 1;
  L = std::min(L, a.fit_max_layers);
  f.predicted = L;
  auto check = [&](int64_t layers) {
    if (layers < 1) return Walkthrough::CapProbe{};
    auto p = w.probe(st, layers, cap, 2, ckpt);
    if (!p.all_ranks_agree)
      rep.fail(detail::str(dist::stage_title(st), " L=", layers, ": not every rank ran out of memory"));
    fit_csv.row(rep.N, dtype_name(rep.dtype), dist::stage_name(st), ckpt ? 1 : 0, cap, layers, p.params, p.peak,
                p.fits ? 1 : 0, p.fits ? "trained under cap" : "out of memory under cap");
    return p;
  };
  f.at = check(L);
  while (L >= 1 && !f.at.fits) f.at = check(--L);
  if (L < a.fit_max_layers) {
    auto next = check(L + 1);
    while (next.fits && L + 1 < a.fit_max_layers) {
      ++L;
      f.at = next;
      next = check(L + 1);
    }
    if (next.fits) ++L, f.at = next;
  }
  f.layers = L;
  return f;
}

// [4] Largest n_layer per stage under --cap-mib, without and with activation checkpointing: checks the prediction
// of peak(L) = a + b L by training under the cap.
void run_cap_experiment(Report& rep, const Args& a, Walkthrough& w) {
  const int64_t cap = static_cast<int64_t>(a.cap_mib * 1024 * 1024);
  rep.say(detail::str("\n[4] Memory cap: ", a.cap_mib,
                      " MiB per rank (all categories). Largest n_layer that trains, per stage, without and with"));
  rep.say("    activation checkpointing of every block (C, T, batch as above). Peaks of uncapped 1-step runs at");
  rep.say("    L = 2, 3, 4 give peak(L) = a + b L (b from L = 3, 4); L* is predicted from it and confirmed under the");
  rep.say("    cap: L* trains 2 steps, L*+1 runs out of memory. b is what one more block costs at the peak: its model");
  rep.say("    states and its activations (checkpointed: its input only).");
  rep.say(detail::str("    ", std::string(118, '-')));
  Csv fit_csv = rep.csv("fit", "n,dtype,stage,checkpoint,cap,n_layer,params,peak,fits,how");
  int64_t ddp_L = 0, zero3_L = 0;
  for (ZeroStage st : kStages)
    for (bool ckpt : {false, true}) {
      const CapFit f = fit_under_cap(rep, a, w, st, ckpt, cap, fit_csv);
      const int64_t L = f.layers;
      if (st == ZeroStage::DDP && !ckpt) ddp_L = L;
      if (st == ZeroStage::Three && !ckpt) zero3_L = L;
      const bool affine = f.peaks[2] - f.peaks[1] == f.peaks[1] - f.peaks[0];
      if (rep.lead)
        std::printf("    %-7s %-13s peak(L=2,3,4) = %s, %s, %s MiB (%s, b = %s MiB); predicted L* = %lld; "
                    "measured L* = %lld%s (%s params)\n",
                    dist::stage_title(st), ckpt ? "checkpointed" : "", mib(f.peaks[0]).c_str(),
                    mib(f.peaks[1]).c_str(), mib(f.peaks[2]).c_str(), affine ? "affine" : "not affine",
                    mib(f.peaks[2] - f.peaks[1]).c_str(), static_cast<long long>(f.predicted),
                    static_cast<long long>(L), L >= a.fit_max_layers ? " (the search's limit)" : "",
                    L >= 1 ? commas(f.at.params).c_str() : "0");
    }
  // The experiment of the doc: DDP on the model ZeRO-3 trains under this cap.
  if (zero3_L > ddp_L) {
    auto ddp = w.probe(ZeroStage::DDP, zero3_L, cap, 2, false);
    auto z3 = w.probe(ZeroStage::Three, zero3_L, cap, 2, false);
    rep.say(detail::str("\n    The same model (L=", zero3_L, ", ", commas(z3.params), " parameters) under a ",
                        a.cap_mib, " MiB cap per rank:"));
    rep.say(detail::str("    DDP:    ",
                        ddp.fits ? "trained (unexpected)" : "out of memory on every rank: " + ddp.error));
    if (rep.lead && z3.fits)
      std::printf("    ZeRO-3: trained 2 steps, losses %.6f %.6f, peak %s MiB per rank\n", z3.losses[0], z3.losses[1],
                  mib(z3.peak).c_str());
    if (ddp.fits || !z3.fits) rep.fail("memory cap: expected DDP out of memory and ZeRO-3 training");
  }
}

// Where the CSVs are, then every check's verdict; returns the exit code (0 all passed, 1 not).
int print_summary(const Report& rep, const Args& a, double loss_tol) {
  rep.say("");
  rep.say(detail::str("CSVs: ", a.out, "/{memory,traffic,steps,trace", a.compare_checkpoint ? ",checkpoint" : "",
                      a.cap_mib > 0 ? ",fit" : "", "}", rep.suffix(),
                      "; pictures: python3 scripts/plot_walkthrough.py --out ", a.out));
  if (rep.failures.empty()) {
    rep.say(detail::str("all checks passed: memory and traffic equal the closed forms; the stages' losses ",
                        loss_tol == 0 ? "are identical" : "agree"));
    return 0;
  }
  if (rep.lead)
    for (auto& f : rep.failures) std::fprintf(stderr, "CHECK FAILED: %s\n", f.c_str());
  return 1;
}

// ---- the program ----

int run(const Args& a, dist::Communicator& comm) {
  Report rep{.lead = comm.rank() == 0, .N = comm.size()};
  rep.dtype = check_args(a, rep.N);
  rep.eb = ElementBytes::of(rep.dtype);
  rep.out = a.out;
  const double loss_tol = a.loss_tol >= 0 ? a.loss_tol : 0.0;
  if (rep.lead) std::filesystem::create_directories(a.out);
  Walkthrough w(a, comm, rep.dtype, data::default_corpus_file());
  rep.say(detail::str("zerodl ZeRO walkthrough: GPT L=", a.n_layer, " C=", a.n_embd, " NH=", a.n_head, " T=", a.seq,
                      ", global batch ", a.batch, " (", a.batch / rep.N, " rows per rank), ", a.steps, " steps, ",
                      dtype_name(rep.dtype), ", N=", rep.N, " ranks (", comm.backend(), "), ", omp_get_max_threads(),
                      " OpenMP thread(s) per rank"));

  const std::vector<StageRun> runs = run_stages(a, w, rep);  // DDP, ZeRO-1, ZeRO-2, ZeRO-3 [, ZeRO-3 prefetch 0]
  const std::span<const StageRun> stages = std::span(runs).first(std::size(kStages));
  print_sizes(rep, a, runs[0]);
  print_memory_table(rep, stages);
  print_traffic_table(rep, stages);
  print_step_table(rep, a, runs, loss_tol);
  write_trace_csv(rep, runs);
  if (a.compare_checkpoint) {
    std::vector<StageRun> ckpt;
    for (ZeroStage st : kStages) ckpt.push_back(w.run_stage(st, a.prefetch, /*checkpointed=*/true));
    print_checkpoint_table(rep, a, stages, ckpt);
  }
  if (a.cap_mib > 0) run_cap_experiment(rep, a, w);
  return print_summary(rep, a, loss_tol);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"zero_walkthrough: DDP, ZeRO-1, ZeRO-2 and ZeRO-3 on the same GPT, measured next to the paper"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--device", a.device, "cpu (the walkthrough measures CPU runs; train_gpt has --device cuda)");
  app.add_option("--n-layer", a.n_layer, "transformer blocks L")->check(CLI::PositiveNumber);
  app.add_option("--n-head", a.n_head, "attention heads")->check(CLI::PositiveNumber);
  app.add_option("--n-embd", a.n_embd, "channels C")->check(CLI::PositiveNumber);
  app.add_option("--seq", a.seq, "sequence length T")->check(CLI::PositiveNumber);
  app.add_option("--batch", a.batch, "global batch B (B/N rows per rank)")->check(CLI::PositiveNumber);
  app.add_option("--steps", a.steps, "training steps per stage (the last is traced)")->check(CLI::PositiveNumber);
  app.add_option("--dtype", a.dtype, "f32, or bf16 (bf16 parameters/gradients, f32 masters and Adam)");
  app.add_option("--lr", a.lr, "AdamW learning rate")->check(CLI::NonNegativeNumber);
  app.add_option("--grad-clip", a.grad_clip, "global gradient-norm clip (0: off)")->check(CLI::NonNegativeNumber);
  app.add_option("--seed", a.seed, "seed of init and data order");
  app.add_option("--prefetch", a.prefetch, "ZeRO-3: units all-gathered ahead")->check(CLI::Range(0, 64));
  app.add_flag("!--no-prefetch-compare", a.compare_prefetch, "skip the ZeRO-3 run without prefetch");
  app.add_flag("!--no-checkpoint-compare", a.compare_checkpoint,
               "skip the runs with activation checkpointing (table [5]; [4] still searches with it)");
  app.add_option("--cap-mib", a.cap_mib, "per-rank memory cap of the largest-model experiment, MiB (0: skip it)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--fit-max-layers", a.fit_max_layers, "upper limit of that experiment's n_layer search")
      ->check(CLI::PositiveNumber);
  app.add_option("--loss-tol", a.loss_tol, "relative loss difference allowed between stages (default 0: identical)");
  app.add_option("--out", a.out, "directory for the CSVs (default walkthrough_out)");
  return io::run_program(
      "zero_walkthrough", app, argc, argv, [&](dist::Communicator& comm) { return run(a, comm); }, {},
      /*path_flags=*/{"--out"});
}

// What the walkthrough measures: one stage's training run, with this rank's memory by category
// (after each step and at its peak), the bytes of every collective per step, the losses and step
// times, and the last step traced event by event; and the runs of the memory-cap experiment.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/memory.h"
#include "data/token_dataset.h"
#include "dist/zero/closed_forms.h"
#include "dist/comm/comm_ledger.h"
#include "dist/comm/communicator.h"
#include "dist/zero/trainer.h"
#include "dist/zero/partitioner.h"
#include "dist/zero/zero_adamw.h"
#include "examples/zero_walkthrough/args.h"
#include "nn/gpt.h"

namespace zdl::walkthrough {

using dist::ZeroStage;
inline constexpr ZeroStage kStages[] = {ZeroStage::DDP, ZeroStage::One, ZeroStage::Two, ZeroStage::Three};

// The walkthrough's byte categories: the ledger's, with full and shard flavours merged.
enum Cat { kParam, kGrad, kOptim, kAct, kComm, kNumCats };
inline constexpr const char* kCatNames[kNumCats] = {"param", "grad", "optim", "activation", "comm"};
using CatBytes = std::array<int64_t, kNumCats>;

// One point of the traced step: an event of the partition manager (or of this program's loop)
// and this rank's memory right then.
struct Sample {
  double t_ms = 0;  // since the step began
  std::string event, unit;
  CatBytes mem{};
  int64_t total = 0;
};

using Traffic = std::array<std::array<dist::CommStats, dist::kNumCommPhases>, dist::kNumCollectiveKinds>;

struct StageRun {
  ZeroStage stage = ZeroStage::DDP;
  int prefetch = 1;
  bool checkpointed = false;  // every block under activation checkpointing
  int64_t psi = 0, padded = 0, units = 0;
  dist::PaddedUnits padded_units;  // each unit's padded elements
  CatBytes after{}, peak{};  // after the last step; peak during it (both minus what was there before)
  int64_t total_after = 0, total_peak = 0;
  std::vector<Traffic> traffic;  // per step
  std::vector<double> losses, step_ms;
  std::vector<Sample> trace;     // last step
  bool same_on_all_ranks = true;
};

// The memory-cap experiment for one model size: fits = no rank ran out of memory.
struct CapProbe {
  bool fits = true;
  bool all_ranks_agree = true;  // every rank failed, or none
  int64_t params = 0;
  int64_t peak = 0;  // total bytes on this rank, at the step's peak (absolute, as the cap sees it)
  std::string error;
  std::vector<double> losses;
  std::vector<double> step_ms;                        // each step's wall time
  std::vector<std::pair<int64_t, int64_t>> disk;      // offload: bytes (read, written) by each step
};

class Walkthrough {
 public:
  Walkthrough(const Args& a, dist::Communicator& comm, DType dtype, std::string data_path)
      : a_(a), comm_(comm), dtype_(dtype), data_path_(std::move(data_path)) {}

  // Trains --steps steps of `stage` on a fresh model; measures everything (see StageRun). Collective.
  StageRun run_stage(ZeroStage stage, int prefetch, bool checkpointed = false);

  // Trains `steps` steps of an n_layer model under a cap on this rank's total bytes (0 = none). Collective.
  CapProbe probe(ZeroStage stage, int64_t n_layer, int64_t cap, int64_t steps, bool checkpointed,
                 const dist::OffloadOptions& offload = {});

 private:
  // Called at the traced step's events, hooks included: (event, unit).
  using Mark = std::function<void(const std::string&, const std::string&)>;
  // A fresh GPT placed by `zero` (not wrapped yet), its blocks checkpointed or not; with `mark`,
  // every unit's forward and backward pre-hooks call it.
  std::shared_ptr<nn::GPT> build_model(dist::ZeroPartitioner& zero, int64_t n_layer, bool checkpointed, Mark* mark);
  void train_step(StageRun& r, dist::ZeroPartitioner& zero, dist::Trainer& trainer, const dist::Trainer::BatchFn& rows,
                  nn::GPT& model, Mark& mark, int64_t step, const MemoryStats& before);
  dist::Trainer make_trainer(dist::ZeroPartitioner& zero, dist::ZeroAdamW& opt);
  data::TokenDataset dataset() const;

  const Args& a_;
  dist::Communicator& comm_;
  DType dtype_;
  std::string data_path_;
};

}  // namespace zdl::walkthrough

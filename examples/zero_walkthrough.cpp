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
// - Every closed form comes from dist/zero/closed_forms.h, the one definition the tests check too.
//
// This file is the flags and the order of the tables; examples/zero_walkthrough/ holds the
// runs (stage_run), tables [1]-[3] and [5] (tables) and the memory-cap search [4] (cap_experiment).
//
// Exit codes: 0 every check passed, 1 a check failed (or an error), 2 bad flags.
#include <omp.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "data/default_corpus.h"
#include "dist/zero/closed_forms.h"
#include "dist/comm/communicator.h"
#include "examples/zero_walkthrough/args.h"
#include "examples/zero_walkthrough/cap_experiment.h"
#include "examples/zero_walkthrough/report.h"
#include "examples/zero_walkthrough/stage_run.h"
#include "examples/zero_walkthrough/tables.h"
#include "io/checkpoint_dir.h"
#include "io/program_main.h"

using namespace zdl;
using namespace zdl::walkthrough;

namespace {

// Input checks (exit 2); returns the dtype.
DType check_args(const Args& a, int N) {
  if (a.device != "cpu") {
    if (a.device == "cuda")
      throw io::UsageError(
          "--device cuda: the walkthrough measures CPU runs only (its closed forms are checked against the CPU's "
          "memory ledger). Run it with --device cpu; train on GPUs with train_gpt --device cuda (docs/cuda.md)");
    throw io::UsageError("--device must be cpu or cuda, got '" + a.device + "'");
  }
  DType dtype;
  try {
    dtype = dtype_from_name(a.dtype);
  } catch (const Error& e) {
    throw io::UsageError(std::string("--dtype: ") + e.what());
  }
  if (dtype != DType::F32 && dtype != DType::BF16) throw io::UsageError("--dtype must be f32 or bf16, got " + a.dtype);
  if (a.batch % N != 0)
    throw io::UsageError(detail::str("--batch ", a.batch, " must be divisible by the number of ranks ", N));
  if (!a.offload_dir.empty() && a.cap_mib <= 0)
    throw io::UsageError("--offload-dir is used by the largest-model search, which --cap-mib 0 skips");
  try {
    gpt_config(a, a.n_layer).validate();
  } catch (const Error& e) {
    throw io::UsageError(e.what());
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
    // A diverged run (a NaN loss, its step skipped) would fail the tables' checks for reasons they
    // cannot name, and NaN compares as "identical": said here, once, by every rank alike (the
    // losses are the ranks' mean).
    const std::vector<double>& losses = runs.back().losses;
    for (size_t s = 0; s < losses.size(); ++s)
      if (!std::isfinite(losses[s]))
        throw io::CollectiveStop(detail::str("the loss is not finite (", losses[s], ") at step ", s + 1, " of ",
                                             dist::stage_title(st), ": the run diverged (is --lr ", a.lr,
                                             " too high?); the tables compare finite runs only"));
  }
  if (a.compare_prefetch && a.prefetch > 0) runs.push_back(w.run_stage(ZeroStage::Three, 0));
  return runs;
}

// Where the CSVs are, then every check's verdict; returns the exit code (0 all passed, 1 not).
int print_summary(const Report& rep, const Args& a) {
  rep.say("");
  rep.say(detail::str("CSVs: ", a.out, "/{memory,traffic,steps,trace", a.compare_checkpoint ? ",checkpoint" : "",
                      a.cap_mib > 0 ? ",fit" : "", "}", rep.suffix(),
                      "; pictures: python3 scripts/plot_walkthrough.py --out ", a.out));
  if (rep.failures.empty()) {
    rep.say(detail::str("all checks passed: memory and traffic equal the closed forms; the stages' losses ",
                        a.loss_tol == 0 ? "are identical" : "agree"));
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
  rep.eb = dist::ElementBytes::of(rep.dtype);
  rep.out = a.out;
  io::agree_on_usage(comm, [&] {  // the CSVs' directory (rank 0 writes them), before any run
    if (!rep.lead) return;
    std::error_code ec;
    std::filesystem::create_directories(a.out, ec);
    if (ec || !std::filesystem::is_directory(a.out))
      throw io::UsageError("--out: cannot make the directory '" + a.out + "'" +
                           (ec ? ": " + ec.message() : std::string(": a file is in the way")));
    if (const std::string why = io::unwritable_reason(a.out); !why.empty())
      throw io::UsageError("--out: the directory '" + a.out + "' is not writable (" + why + ")");
    // An earlier run's CSVs for this N go: a kind this run does not write (fit_ without the cap
    // experiment) would otherwise be drawn with this run's as one run's.
    for (const char* kind : {"memory", "traffic", "steps", "trace", "checkpoint", "fit"})
      std::filesystem::remove(std::filesystem::path(a.out) / (kind + rep.suffix()), ec);
  });
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
  print_step_table(rep, a, runs);
  write_trace_csv(rep, runs);
  if (a.cap_mib > 0) run_cap_experiment(rep, a, w);  // [4], then [5]: docs/walkthrough.md's order
  if (a.compare_checkpoint) {
    std::vector<StageRun> ckpt;
    for (ZeroStage st : kStages) ckpt.push_back(w.run_stage(st, a.prefetch, /*checkpointed=*/true));
    print_checkpoint_table(rep, a, stages, ckpt);
  }
  return print_summary(rep, a);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"zero_walkthrough: DDP, ZeRO-1, ZeRO-2 and ZeRO-3 on the same GPT, measured next to the paper"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)->always_capture_default();
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
  app.add_option("--offload-dir", a.offload_dir,
                 "with --cap-mib: also search ZeRO-3 with NVMe offload, its files in this directory (docs/offload.md)");
  app.add_option("--fit-max-layers", a.fit_max_layers, "upper limit of that experiment's n_layer search")
      ->check(CLI::PositiveNumber);
  app.add_option("--loss-tol", a.loss_tol, "relative loss difference allowed between stages (default 0: identical)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--out", a.out, "directory for the CSVs (default walkthrough_out)");
  return io::run_program(
      "zero_walkthrough", app, argc, argv, [&](dist::Communicator& comm) { return run(a, comm); }, {},
      /*path_flags=*/{"--out"});
}

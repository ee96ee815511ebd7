// train_gpt: trains a GPT-2-style model on a text file (byte-level) or on llm.c's GPT-2 token
// shards, the main job of zerodl.
// One code path for one process and for N ranks: the model is always placed by the ZeRO
// partition manager (stage 0 = DDP on one rank is plain training, bit for bit).
//
//   train_gpt                                              # embedded default corpus, small model
//   mpirun -np 4 train_gpt --zero-stage 3                  # 4 ranks, everything sharded
//   train_gpt --data input.txt --steps 2000 --n-layer 4 --n-embd 128 --save ckpt
//   train_gpt --data 'fineweb10B/fineweb_train_*.bin' --seq 1024     # llm.c shards: vocab 50257
//   train_gpt --data 'shards/tiny_train_*.bin' --tokenizer gpt2.tiktoken --sample 200   # BPE samples
//   mpirun -np 2 train_gpt --resume ckpt --zero-stage 2    # resume on another N / stage
//   train_gpt --init-from gpt2.safetensors --eval-only --data val.txt
//   mpirun -np 8 train_gpt --device cuda --zero-stage 3    # one rank per GPU (NCCL)
//
// Exit codes: 0 done, 2 bad input (flags, files, configs), 1 failure during training.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/data_fingerprint.h"
#include "dist/comm/communicator.h"
#include "dist/zero/trainer.h"
#include "dist/zero/partitioner.h"
#include "dist/zero/zero_adamw.h"
#include "examples/train_gpt/announce.h"
#include "examples/train_gpt/args.h"
#include "examples/train_gpt/configure.h"
#include "examples/train_gpt/sample.h"
#include "examples/train_gpt/session.h"
#include "examples/train_gpt/train_loop.h"
#include "io/interrupt.h"
#include "io/program_flags.h"
#include "io/program_main.h"
#include "io/progress.h"
#include "nn/gpt.h"

using namespace zdl;
using namespace zdl::train_gpt;
using io::UsageError;

namespace {

// ---- the flags, in --help's order ----

// The data, the steps and batch, and a new model's shape.
void add_data_and_model_flags(CLI::App& app, Args& a) {
  app.add_option("--data", a.data,
                 "text file to train on, or llm.c GPT-2 token shards: FILE.bin or a quoted pattern "
                 "'DIR/*_train_*.bin' read in name order (default: the embedded generated corpus)");
  app.add_option("--steps", a.steps, "total optimizer steps")->check(CLI::PositiveNumber);
  app.add_option("--batch", a.batch, "sequences per micro-batch over all ranks (B; each rank takes B/N); a step takes B x --grad-accum")->check(CLI::PositiveNumber);
  app.add_option("--seq", a.seq, "sequence length T (also the context length of a new model)")->check(CLI::PositiveNumber);
  app.add_option("--n-layer", a.n_layer, "transformer blocks L")->check(CLI::PositiveNumber);
  app.add_option("--n-head", a.n_head, "attention heads")->check(CLI::PositiveNumber);
  app.add_option("--n-embd", a.n_embd, "channels C")->check(CLI::PositiveNumber);
  app.add_option("--vocab-multiple", a.vocab_multiple,
                 "pad a new model's vocabulary to a multiple of this (default 1; 128 with llm.c shards, as GPT-2)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
}

// The optimizer, the schedule and validation.
void add_optimizer_flags(CLI::App& app, Args& a) {
  app.add_option("--lr", a.lr, "peak learning rate")->check(CLI::NonNegativeNumber);
  app.add_option("--min-lr-ratio", a.min_lr_ratio, "final lr as a fraction of the peak")->check(CLI::Range(0.0, 1.0));
  app.add_option("--warmup", a.warmup, "linear warmup steps")->check(CLI::NonNegativeNumber);
  app.add_option("--weight-decay", a.weight_decay, "AdamW weight decay (matrices only)")->check(CLI::NonNegativeNumber);
  app.add_option("--grad-clip", a.grad_clip, "global gradient-norm clip (0: off)")->check(CLI::NonNegativeNumber);
  app.add_option("--dropout", a.dropout, "dropout probability")->check(CLI::Range(0.0, 0.99));
  app.add_option("--activation-checkpointing", a.activation_checkpointing,
                 "keep only the inputs of blocks 0, K, 2K, ... in forward and recompute them in backward: less "
                 "activation memory for one more forward of those blocks, the same bits (0: off; 1: every block)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", a.seed, "seed of init, data order and sampling");
  app.add_option("--grad-accum", a.grad_accum, "micro-batches per step")->check(CLI::PositiveNumber);
  app.add_option("--eval-every", a.eval_every, "validation every N steps (0: off)")->check(CLI::NonNegativeNumber);
  app.add_option("--eval-batches", a.eval_batches, "batches per validation (and for --eval-only; 0: all)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--val-fraction", a.val_fraction, "fraction of the data held out")->check(CLI::Range(0.0, 0.9));
}

// Checkpoints and the weights a run starts from.
void add_checkpoint_flags(CLI::App& app, Args& a) {
  app.add_option("--save", a.save, "checkpoint directory, written at the end (and every --save-every steps)");
  app.add_option("--export-hf", a.export_hf,
                 "at the end, write the model as a Hugging Face directory (model.safetensors, config.json) that "
                 "transformers' GPT2LMHeadModel.from_pretrained loads as is");
  app.add_option("--save-every", a.save_every, "checkpoint every N steps")->check(CLI::NonNegativeNumber);
  app.add_option("--stop-after", a.stop_after,
                 "stop (and save) after this step; the schedule still spans --steps (a preemption)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--resume", a.resume, "continue from this checkpoint directory (same trajectory)");
  app.add_option("--init-from", a.init_from, "initialize from a GPT-2-layout safetensors file");
  app.add_flag("--eval-only", a.eval_only,
               "print the loss on the whole --data read in order from its start, then exit (the optimizer's and "
               "schedule's flags are ignored, so a training command with --eval-only added scores its model)");
}

// Sampling and the metrics log.
void add_output_flags(CLI::App& app, Args& a) {
  app.add_option("--sample", a.sample, "generate N tokens at the end (bytes on text; on llm.c shards with --tokenizer)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--prompt", a.prompt,
                 "text to start sampling from (default: a newline on text; on shards, <|endoftext|> alone, as a "
                 "document starts)");
  app.add_option("--temperature", a.temperature, "sampling temperature")->check(CLI::PositiveNumber);
  app.add_option("--top-k", a.top_k, "sample among the k most likely tokens (0: all)")->check(CLI::NonNegativeNumber);
  app.add_option("--metrics", a.metrics, "append a JSON line per step (and config, eval lines) to this file");
  app.add_flag("--metrics-all-ranks", a.metrics_all_ranks,
               "every rank writes its own metrics file (rank 0 FILE, rank r > 0 FILE with .rank<r> before the "
               "extension)");
}

// ZeRO, precision, memory and failure handling.
void add_zero_flags(CLI::App& app, Args& a) {
  app.add_option("--zero-stage", a.zero_stage, "0 = DDP, 1 = shard optimizer states, 2 = + gradients, 3 = + parameters")
      ->check(CLI::Range(0, 3));
  app.add_option("--dtype", a.dtype, "compute and communication dtype: f32 or bf16 (masters and Adam stay f32)");
  app.add_option("--prefetch", a.prefetch, "ZeRO-3: units all-gathered ahead of use")->check(CLI::Range(0, 64));
  app.add_option("--shard-group", a.shard_group,
                 "hybrid sharding (stages 1-3): shard the model states within groups of K consecutive ranks and "
                 "replicate them across groups; K = the ranks per node keeps gathers and reduce-scatters on the node "
                 "(default: all ranks; bit-identical either way)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--secondary-partition", a.secondary_partition,
               "ZeRO-3 (ZeRO++'s hpZ): keep each unit's gathered parameters cut over this node's ranks from its "
               "forward to its backward, so the backward's gathers stay on the node (more memory; the same bits)");
  app.add_option("--quantize-weights", a.quantize_weights,
                 "ZeRO-3 (ZeRO++'s qwZ): int8 moves the parameter gathers as int8 codes with a scale per 256 "
                 "values, 1/4 of f32's bytes; the forward and backward see weights within 1/254 of each block's "
                 "largest, so the losses drift from the exact run's (docs/multinode.md); default none")
      ->check(CLI::IsMember({"none", "int8"}));
  app.add_option("--quantize-grads", a.quantize_grads,
                 "stages 1-3 on several nodes (ZeRO++'s qgZ): int8 moves the gradient reduce-scatter as int8 codes "
                 "in two hops, within each node and then across nodes with the node's partial sums, so about 1/R "
                 "of the gradient crosses nodes; the losses drift from the exact run's (docs/multinode.md); "
                 "default none")
      ->check(CLI::IsMember({"none", "int8"}));
  app.add_option("--reduction", a.reduction,
                 "gradient sums: exact (a fixed tree: the same bits at any world size with the same --batch/N) or "
                 "native (the MPI library's own order)")
      ->check(CLI::IsMember({"exact", "native"}));
  app.add_option("--max-memory-per-rank", a.max_memory_per_rank,
                 "memory cap per rank, in bytes or with a unit (512M, 2G, 1.5GiB; K, M, G are 1024-based); going "
                 "over it is a clear out-of-memory error (0: none)")
      ->transform(io::ByteSize());
  app.add_option("--offload-optimizer", a.offload_optimizer,
                 "where Adam's moments and the f32 masters live: none, cpu (on a GPU: host memory, updated by the "
                 "CPU; on CPU ranks the same as none) or nvme (CPU ranks: files under --offload-dir, read one unit "
                 "ahead); bit-identical either way")
      ->check(CLI::IsMember({"none", "cpu", "nvme"}));
  app.add_option("--offload-params", a.offload_params,
                 "ZeRO-3's parameter shards: none or nvme (files under --offload-dir, read ahead of each gather)")
      ->check(CLI::IsMember({"none", "nvme"}));
  app.add_option("--offload-dir", a.offload_dir, "a directory on a fast local disk for the offload files (nvme)");
  app.add_option("--offload-io", a.offload_io,
                 "direct: bypass the page cache where the filesystem allows (default); cached: through it")
      ->check(CLI::IsMember({"direct", "cached"}));
  app.add_option("--offload-window-mib", a.offload_window_mib,
                 "with --offload-optimizer nvme: MiB of optimizer states (moments and masters; in f32 with "
                 "--offload-params nvme the master is the parameter shard) kept in memory outside the optimizer "
                 "step, so their reads run under the backward and their writes under the next forward (default 0)")
      ->check(CLI::Range(0.0, 1.0e9));
  app.add_option("--collective-timeout", a.collective_timeout,
                 "seconds a collective may take before the watchdog fails the run (default 300; at most a year)")
      ->check(CLI::Range(0.0, std::chrono::duration<double>(dist::Communicator::kMaxTimeout).count()));
  app.add_option("--on-nan", a.on_nan,
                 "a non-finite loss or gradient (any rank): stop the run (exit 1), or skip the step")
      ->check(CLI::IsMember({"stop", "skip"}));
  app.add_option("--nan-skip-limit", a.nan_skip_limit, "with --on-nan skip: stop after this many non-finite steps in a row")
      ->check(CLI::PositiveNumber);
  app.add_option("--fault-nan-grad", a.fault_nan_grad, "test hook: STEP:PARAM gets a NaN gradient on the last rank")
      ->group("");  // hidden
  app.add_option("--log-every", a.log_every, "log a line every N steps when not on a terminal (default: 20 lines)")
      ->check(CLI::NonNegativeNumber);
}

// Devices, collectives and the vocabulary.
void add_device_flags(CLI::App& app, Args& a) {
  app.add_option("--device", a.device,
                 "cpu, or cuda: each rank trains on GPU (local rank % GPU count); needs a CUDA build")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--dist-backend", a.dist_backend,
                 "collectives: auto (cuda: NCCL when every rank has its own GPU, else MPI staged through host "
                 "memory), mpi, nccl (cuda only)")
      ->check(CLI::IsMember({"auto", "mpi", "nccl"}));
  app.add_option("--ranks-per-node", a.ranks_per_node,
                 "treat every K consecutive ranks as one node (default: the hosts mpirun placed the ranks on): the "
                 "traffic report splits bytes within and across nodes; try a multi-node layout on one machine")
      ->check(CLI::PositiveNumber);
  app.add_option("--peak-tflops", a.peak_tflops,
                 "the GPU's peak bf16 TFLOP/s for MFU (default: from its name, e.g. H100 989, A100 312)")
      ->check(CLI::PositiveNumber);
  app.add_option("--vocab-size", a.vocab_size,
                 "model vocabulary of a new model (default: the data's, 256 for bytes; for llm.c shards the "
                 "--tokenizer's, else GPT-2's 50257; it must exceed every token id; larger than 256 on text, to "
                 "measure speed at that size: the data stay bytes)")
      ->check(CLI::Range(int64_t{256}, int64_t{1} << 24));
  app.add_option("--tokenizer", a.tokenizer,
                 "the BPE tokenizer of llm.c shards, for --prompt and --sample: GPT-2's files (a directory with "
                 "encoder.json and vocab.bpe) or a .tiktoken file; a new model takes its vocabulary size");
}

// The process group's options from --device and --dist-backend.
dist::InitOptions init_options(const Args& a) {
  if (a.device == "cpu") {
    if (a.dist_backend == "nccl") throw UsageError("--dist-backend nccl needs --device cuda");
    return {.device = Device::cpu(), .backend = a.dist_backend, .ranks_per_node = a.ranks_per_node};
  }
#ifndef ZDL_WITH_CUDA
  throw UsageError("--device cuda: this zerodl build has no CUDA support (configure with -DZDL_CUDA=ON and a "
                   "CUDA toolkit)");
#endif
  if (!cuda_available())
    throw UsageError("--device cuda: no CUDA device is visible on this machine (driver loaded? "
                     "CUDA_VISIBLE_DEVICES?)");
  // dist::init makes GPU (local rank % device count) current before anything touches a GPU.
  return {.device = Device::cuda(), .backend = a.dist_backend, .ranks_per_node = a.ranks_per_node};
}

// ---- the run ----

int run(const Args& args, const CLI::App& app, dist::Communicator& comm) {
  Args a = args;
  // This rank's device: its GPU (local rank % device count, made current by dist::init) or the CPU.
  const Device dev = a.device == "cuda" ? comm.device() : Device::cpu();
  DeviceInfo gpu = dev.is_cuda() ? device_info(dev) : DeviceInfo{};
  if (a.peak_tflops > 0) gpu.peak_bf16_tflops = a.peak_tflops;
  Setup s = configure(a, app, comm, dev);
  std::vector<data::DataFingerprint> file_fps = s.ds->files().file_fingerprints();
  const data::DataFingerprint data_fp = data::combine(file_fps);
  check_same_data_on_every_rank(data_fp, static_cast<int64_t>(file_fps.size()), comm);

  // ---- the model, placed by the partition manager ----
  if (a.max_memory_per_rank > 0) memory_ledger().set_cap(dev.type, a.max_memory_per_rank);
  auto shared_comm = std::shared_ptr<dist::Communicator>(&comm, [](dist::Communicator*) {});
  dist::ZeroPartitioner zero(shared_comm, dist::ZeroOptions{.stage = dist::stage_from_int(a.zero_stage),
                                                            .compute_dtype = s.dtype,
                                                            .device = dev,
                                                            .prefetch = a.prefetch,
                                                            .reduction = a.reduction == "exact"
                                                                             ? dist::GradReduction::Exact
                                                                             : dist::GradReduction::Native,
                                                            .shard_group = a.shard_group,
                                                            .secondary_partition = a.secondary_partition,
                                                            .quantize_weights = a.quantize_weights == "int8",
                                                            .quantize_grads = a.quantize_grads == "int8",
                                                            .offload = s.offload});
  std::shared_ptr<nn::GPT> model = build_model(zero, a, s.cfg);
  if (!a.init_from.empty() && !s.resumed) load_init_from(comm, zero, *model, a.init_from);
  dist::ZeroAdamW opt(zero, {.lr = a.lr, .beta1 = 0.9, .beta2 = 0.95}, a.weight_decay);
  dist::Trainer trainer(zero, opt,
                        {.grad_accum = a.grad_accum, .micro_batch = a.batch / comm.size(), .grad_clip = a.grad_clip,
                         .seed = a.seed});
  Session x{a, s, comm, dev, zero, *model, opt, trainer, std::move(file_fps), data_fp};

  // ---- a checkpoint's states: weights and Adam moments; the step fixes data and dropout ----
  const int64_t first_step = s.resumed ? resume(x) : 0;
  if (a.eval_only) {  // the weights (a checkpoint's, a GPT-2 file's or fresh ones) on any data
    if (x.lead() && !s.resumed && a.init_from.empty())
      std::fprintf(stderr, "train_gpt: note: --eval-only without --resume or --init-from scores a freshly initialized "
                           "model (--seed %llu)\n", static_cast<unsigned long long>(a.seed));
    const auto [loss, batches] = evaluate(x, data::Split::Train, a.eval_batches);
    if (x.lead()) std::printf("loss %.6f\n", loss);
    s.metrics->write({{"type", "eval"}, {"loss", loss}, {"batches", batches}});
    if (a.sample > 0) print_sample(x, app);  // a checkpoint's text, without training it
    return 0;
  }
  announce(x, gpu, first_step);
  io::Progress progress(a.steps, a.log_every, !x.lead());
  // Ctrl-C or SIGTERM: every rank stops after the step, saves, exits 130 / 143 (io/interrupt.h).
  const std::string ack = "\ntrain_gpt: interrupted: stopping after this step" +
                          std::string(a.save.empty() ? "" : ", saving to " + a.save) +
                          " (interrupt again to stop at once, unsaved)\n";
  {
    io::InterruptScope interrupt(x.lead() ? ack.c_str() : nullptr);
    if (const int sig = train(x, first_step, gpu, progress)) return io::exit_code_of_signal(sig);  // failures: exit 1
    if (!a.export_hf.empty()) export_hf(x, progress);  // a signal meanwhile waits for the export
    if (const int sig = io::interrupt_signal()) return io::exit_code_of_signal(sig);
  }
  // Sampling saves nothing, so a signal ends it at once, as without the scope.
  if (a.sample > 0) print_sample(x, app);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"train_gpt: train a GPT-2-style model on a text file (byte-level) or llm.c token shards with zerodl"};
  // A repeated flag: the last wins. --help shows every default.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)->always_capture_default();
  add_data_and_model_flags(app, a);
  add_optimizer_flags(app, a);
  add_checkpoint_flags(app, a);
  add_output_flags(app, a);
  add_zero_flags(app, a);
  add_device_flags(app, a);
  return io::run_program(
      "train_gpt", app, argc, argv,
      [&](dist::Communicator& comm) {
        if (a.collective_timeout > 0)
          comm.set_timeout(std::chrono::milliseconds(static_cast<int64_t>(a.collective_timeout * 1000)),
                          "--collective-timeout");
        return run(a, app, comm);
      },
      [&] { return init_options(a); },
      /*path_flags=*/{"--data", "--save", "--resume", "--init-from", "--metrics", "--tokenizer", "--export-hf"});
}

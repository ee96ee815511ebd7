#include "examples/train_gpt/configure.h"

#include <sys/statvfs.h>

#include <filesystem>

#include "data/byte_tokenizer.h"
#include "data/data_record.h"
#include "data/default_corpus.h"
#include "dist/zero/closed_forms.h"
#include "examples/train_gpt/model_config.h"
#include "io/checkpoint_dir.h"
#include "io/gpt2_format.h"
#include "io/hf_dir.h"
#include "io/program_main.h"
#include "nn/gpt_memory.h"

namespace zdl::train_gpt {

using io::UsageError;

namespace {

// Every rank makes the default corpus itself (atomic write): no shared file system needed.
// `from_checkpoint`: --data is the checkpoint's, not the command line's (a resumed run).
data::TokenFiles open_data(const Args& a, Setup& s, bool from_checkpoint) {
  const std::string whose = from_checkpoint ? " (the checkpoint's --data; give --data where the files are now)" : "";
  try {
    s.data_path = a.data.empty() ? data::default_corpus_file() : a.data;
  } catch (const std::exception& e) {  // $TMPDIR missing or read-only, a directory in the file's place
    throw UsageError(detail::str("no --data, and the built-in corpus could not be written to $TMPDIR (",
                                 without_code_location(e.what()), "): give --data FILE, or set TMPDIR to a writable "
                                 "directory"));
  }
  if (!data::is_glob_pattern(s.data_path) && !std::filesystem::exists(s.data_path))
    throw UsageError("--data: no file '" + s.data_path + "'" + whose);
  std::optional<data::TokenFiles> files;
  try {
    files.emplace(s.data_path);
  } catch (const Error& e) {
    throw UsageError(std::string("--data: ") + e.what() + whose);
  }
  if (!a.tokenizer.empty()) {
    if (files->format() != data::TokenFormat::Llmc)
      throw UsageError("--tokenizer: the data are text, whose bytes are the tokens; encode the text into token "
                       "shards with prepare_tokens and train on those (--data 'PREFIX_train_*.bin')");
    try {
      s.tok.emplace(data::BpeTokenizer::load(a.tokenizer));
    } catch (const Error& e) {
      throw UsageError(std::string("--tokenizer: ") + e.what());
    }
  }
  return std::move(*files);
}

// Sampling encodes the prompt and decodes the sample: as bytes on text, with --tokenizer on shards.
void check_sampling(const Args& a, const CLI::App& app, const Setup& s, bool gpt2_tokens) {
  const char* sampling = a.sample > 0 ? "--sample" : given(app, "--prompt") ? "--prompt" : nullptr;
  if (sampling && gpt2_tokens && !s.tok)
    throw UsageError(detail::str(sampling, ": the data are token ids (llm.c shards); give the tokenizer that made "
                                 "them with --tokenizer (GPT-2's encoder.json + vocab.bpe, or a .tiktoken file) to "
                                 "encode the prompt and decode the sample, or drop ", sampling));
  if (sampling && !gpt2_tokens && s.cfg.vocab_size != data::ByteTokenizer::kVocabSize)
    throw UsageError(detail::str(sampling, " on text works in bytes: it needs the byte vocabulary 256, not ",
                                 s.cfg.vocab_size, " (--vocab-size larger than 256 is for measuring speed; a BPE "
                                 "vocabulary needs token shards from prepare_tokens and --tokenizer)"));
  if (sampling && s.tok && !s.tok->eot_id() && (!given(app, "--prompt") || a.prompt.empty()))
    throw UsageError(detail::str(sampling, ": the tokenizer has no <|endoftext|> to start a sample from; give a "
                                 "--prompt"));
  if (sampling && !s.tok && given(app, "--prompt") && a.prompt.empty())
    throw UsageError(detail::str(sampling, ": --prompt is empty; on bytes a sample starts from at least one (leave "
                                 "--prompt out to start from a newline)"));
}

// A model whose states alone cannot fit in this machine's memory (or its GPU's) cannot work:
// said at startup, not by a failed allocation (or the OOM killer) part way through building it.
void check_model_fits_in_memory(const nn::GPTConfig& c, const Args& a, DType dtype, int world, Device dev) {
  // Offloaded optimizer states (to the host from a GPU, or to NVMe) leave the device's memory.
  const bool offloaded = a.offload_optimizer == "nvme" || (a.offload_optimizer == "cpu" && dev.is_cuda());
  const nn::TrainingMemoryFloor need =
      nn::training_memory_floor(c, a.batch, a.seq, world, offloaded, static_cast<int64_t>(element_size(dtype)));
  const double have = static_cast<double>(device_info(dev).total_bytes);
  constexpr double GiB = 1024.0 * 1024.0 * 1024.0;
  if (have > 0 && need.total() > have)
    throw UsageError(detail::str("the model (n_layer ", c.n_layer, ", n_embd ", c.n_embd, ", context ", c.block_size, ": ",
                                 need.parameters, " parameters) with --batch ", a.batch, " x --seq ", a.seq,
                                 " needs at least ", need.total() / GiB, " GiB per rank (states ", need.states / GiB,
                                 " GiB over ", world, " rank(s), logits ", need.logits / GiB, " GiB), more than ",
                                 dev.is_cuda() ? "this GPU's " : "this machine's ", have / GiB,
                                 " GiB; choose a smaller model or batch, or more ranks"));
  // The same floor against the user's cap: a cap the model cannot meet at any stage is bad input,
  // said now (a cap above the floor that the run still exceeds is an out-of-memory error later).
  if (a.max_memory_per_rank > 0 && need.total() > static_cast<double>(a.max_memory_per_rank))
    throw UsageError(detail::str("--max-memory-per-rank ", format_bytes(a.max_memory_per_rank), " is less than this model "
                                 "needs per rank at any --zero-stage: at least ",
                                 format_bytes(static_cast<int64_t>(need.total())), " (states ",
                                 format_bytes(static_cast<int64_t>(need.states)), " over ", world,
                                 " rank(s), logits ", format_bytes(static_cast<int64_t>(need.logits)),
                                 "); raise the cap, or choose a smaller model or batch, or more ranks"));
}

// Optimizer offload to cpu on a GPU keeps every local rank's masters, Adam moments and exchange
// buffer in host memory (dist::host_tier_bytes_closed_form): more than the machine has is said at
// startup, not by the out-of-memory killer part way through placing them.
void check_host_tier_fits(const Args& a, const Setup& s, int world, int ranks_here) {
  const int shards = a.shard_group > 0 ? a.shard_group : world;
  int64_t per_rank = 0;
  for (auto& [cat, bytes] : dist::host_tier_bytes_closed_form(dist::stage_from_int(a.zero_stage), s.offload, Device::cuda(),
                                                              dist::gpt_padded_units(s.cfg, world).total(), shards,
                                                              dist::ElementBytes::of(s.dtype)))
    per_rank += bytes;
  const int64_t have = device_info(Device::cpu()).total_bytes, need = per_rank * ranks_here;
  if (have > 0 && need > have)
    throw UsageError(detail::str("--offload-optimizer cpu: the optimizer states of this machine's ", ranks_here,
                                 " rank(s) need ", format_bytes(need), " of host memory (masters, Adam moments and "
                                 "exchange buffers), more than its ", format_bytes(have), "; shard them over more "
                                 "ranks (a higher --zero-stage, more GPUs or machines), or keep them on the GPU "
                                 "(--offload-optimizer none)"));
}

// --offload-*: the combination, and room in --offload-dir for what every rank places there
// (dist::offloaded_bytes_closed_form, plus each buffer's 4 KiB alignment), checked before any
// work. The directory holds one unlinked scratch file per rank while the run lasts.
void check_offload(const Args& a, const CLI::App& app, Setup& s, int world, int ranks_here, Device dev) {
  dist::OffloadOptions& o = s.offload;
  o.optimizer = dist::offload_target_from_name(a.offload_optimizer);
  o.params = dist::offload_target_from_name(a.offload_params);
  o.dir = a.offload_dir;
  o.direct_io = a.offload_io == "direct";
  o.window_bytes = static_cast<int64_t>(a.offload_window_mib * 1024.0 * 1024.0);
  if (o.window_bytes > 0 && o.optimizer != dist::OffloadTarget::Nvme)
    throw UsageError("--offload-window-mib holds optimizer states that live on NVMe; it needs --offload-optimizer nvme");
  if (!o.any_nvme()) {
    for (const char* flag : {"--offload-dir", "--offload-io"})
      if (given(app, flag))
        throw UsageError(std::string(flag) + " applies to --offload-optimizer nvme or --offload-params nvme");
    if (o.optimizer == dist::OffloadTarget::Cpu && dev.is_cuda()) check_host_tier_fits(a, s, world, ranks_here);
    return;
  }
  if (dev.is_cuda()) throw UsageError("--offload-* nvme runs on CPU ranks (--device cpu) in this version");
  if (o.params == dist::OffloadTarget::Nvme && a.zero_stage != 3)
    throw UsageError(detail::str("--offload-params nvme moves ZeRO-3's parameter shards; use --zero-stage 3 (got ",
                                 a.zero_stage, ")"));
  if (!given(app, "--offload-dir")) throw UsageError("--offload-* nvme needs --offload-dir DIR (a fast local disk)");
  if (a.offload_dir.empty()) throw UsageError("--offload-dir is empty: name a directory on a fast local disk");
  std::error_code ec;
  if (!std::filesystem::is_directory(a.offload_dir, ec))
    throw UsageError("--offload-dir '" + a.offload_dir + "' is not a directory: create it, or name another");
  if (const std::string why = io::unwritable_reason(a.offload_dir); !why.empty())
    throw UsageError("--offload-dir '" + a.offload_dir + "' is not writable (" + why + ")");
  const dist::PaddedUnits units = dist::gpt_padded_units(s.cfg, world);
  int64_t per_rank = 0;
  const int shards = a.shard_group > 0 ? a.shard_group : world;  // hybrid sharding: a group's share
  for (auto& [cat, bytes] : dist::offloaded_bytes_closed_form(dist::stage_from_int(a.zero_stage), o, units.total(),
                                                              shards, dist::ElementBytes::of(s.dtype)))
    per_rank += bytes;
  per_rank += 3 * static_cast<int64_t>(units.blocks.size() + 1) * 4096;  // up to 3 buffers a unit, 4 KiB aligned
  struct statvfs fs {};
  if (::statvfs(a.offload_dir.c_str(), &fs) != 0) return;  // unknown: placing the states reports it
  const int64_t free_bytes = static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
  // The ranks of this machine share its disk; other machines' ranks write to theirs.
  if (free_bytes < per_rank * ranks_here)
    throw UsageError(detail::str("--offload-dir '", a.offload_dir, "' has ", format_bytes(free_bytes),
                                 " free, and the offload files of this machine's ", ranks_here, " rank(s) need ",
                                 format_bytes(per_rank * ranks_here), ": free space there or name a larger disk"));
}

// The model's config and the flags that depend on it, in the order the user meets them.
void check_model(Args& a, const CLI::App& app, Setup& s, const data::TokenFiles& files, int world, int ranks_here,
                 Device dev) {
  const bool gpt2_tokens = files.format() == data::TokenFormat::Llmc;
  s.cfg = model_config(a, app, s.resumed, files.format(), s.tok ? s.tok->vocab_size() : 0);
  try {
    s.cfg.validate();
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  if (a.activation_checkpointing > s.cfg.n_layer)
    throw UsageError(detail::str("--activation-checkpointing ", a.activation_checkpointing, " exceeds the model's ",
                                 s.cfg.n_layer, " layers: K checkpoints blocks 0, K, 2K, ...; give 1 to ",
                                 s.cfg.n_layer, " (", s.cfg.n_layer, ": block 0 only), or 0 for none"));
  // A model from a file fixes the context: the default --seq follows it down (it was refused as
  // "--seq 64 exceeds the model's context length 16" for a --seq nobody gave).
  if (!a.init_from.empty() && !given(app, "--seq") && a.seq > s.cfg.block_size) a.seq = s.cfg.block_size;
  if (a.seq > s.cfg.block_size)
    throw UsageError(detail::str("--seq ", a.seq, " exceeds the model's context length ", s.cfg.block_size,
                                 s.resumed ? " (the checkpoint's model)" : !a.init_from.empty() ? " (the --init-from file's)" : ""));
  if (a.shard_group > 0 && world % a.shard_group != 0)
    throw UsageError(detail::str("--shard-group ", a.shard_group, " must divide the number of ranks ", world,
                                 " (groups of K ranks shard the states, and the N/K groups replicate them)"));
  if (a.shard_group > 0 && a.zero_stage == 0)
    throw UsageError(detail::str("--shard-group shards the model states within groups, but --zero-stage 0 (DDP) ",
                                 "shards nothing: use --zero-stage 1, 2 or 3"));
  if (a.secondary_partition && a.zero_stage != 3)
    throw UsageError(detail::str("--secondary-partition keeps ZeRO-3's gathered parameters for the backward; use "
                                 "--zero-stage 3 (got --zero-stage ", a.zero_stage, ")"));
  if (a.quantize_weights != "none" && a.zero_stage != 3)
    throw UsageError(detail::str("--quantize-weights quantizes ZeRO-3's parameter gathers; use --zero-stage 3 (got ",
                                 "--zero-stage ", a.zero_stage, ")"));
  if (a.quantize_weights != "none" && dev.is_cuda())
    throw UsageError("--quantize-weights runs on CPU ranks in this version of zerodl");
  if (a.quantize_grads != "none" && a.zero_stage == 0)
    throw UsageError("--quantize-grads replaces ZeRO's gradient reduce-scatter; --zero-stage 0 (DDP) all-reduces: use "
                     "--zero-stage 1, 2 or 3");
  if (a.quantize_grads != "none" && dev.is_cuda())
    throw UsageError("--quantize-grads runs on CPU ranks in this version of zerodl");
  if (a.secondary_partition && a.offload_params != "none")
    throw UsageError("--secondary-partition with --offload-params nvme is not supported: use one or the other");
  if (given(app, "--prefetch") && a.zero_stage != 3)
    throw UsageError(detail::str("--prefetch applies to --zero-stage 3 only (got --zero-stage ", a.zero_stage, ")"));
  if (given(app, "--peak-tflops") && !dev.is_cuda())
    throw UsageError("--peak-tflops applies to --device cuda only (MFU is reported for GPUs)");
  if (s.tok && s.tok->vocab_size() > s.cfg.vocab_size)
    throw UsageError(detail::str("--tokenizer: its vocabulary (", s.tok->vocab_size(), " tokens) is larger than the "
                                 "model's (", s.cfg.vocab_size, s.resumed ? ", the checkpoint's" : "",
                                 "): it is not the tokenizer of this model"));
  check_sampling(a, app, s, gpt2_tokens);
  // The dtype first: the memory floor below is sized by it.
  try {
    s.dtype = dtype_from_name(a.dtype);
  } catch (const Error& e) {
    throw UsageError(std::string("--dtype: ") + e.what());
  }
  if (s.dtype != DType::F32 && s.dtype != DType::BF16) throw UsageError("--dtype must be f32 or bf16, got " + a.dtype);
  check_model_fits_in_memory(s.cfg, a, s.dtype, world, dev);
  if (!gpt2_tokens && s.cfg.vocab_size < data::ByteTokenizer::kVocabSize)
    throw UsageError(detail::str("the model's vocabulary (", s.cfg.vocab_size, ") is smaller than the byte tokenizer's 256"));
  if (a.batch % world != 0)
    throw UsageError(detail::str("--batch ", a.batch, " must be divisible by the number of ranks ", world,
                                 " (each rank takes batch/N rows of the global batch)"));
  check_offload(a, app, s, world, ranks_here, dev);
}

// The dataset over this rank's rows; a resumed run's data must have the checkpoint's sizes.
void open_dataset(const Args& a, Setup& s, data::TokenFiles files, const dist::Communicator& comm) {
  // Scored on other data, a checkpoint's model still reads tokens of its own kind: text's bytes
  // are not ids of a model trained on token shards (nor the reverse).
  if (s.resumed && a.eval_only) {
    const std::string then = data::recorded_format(s.resumed->metadata), now = data::format_name(files.format());
    if (!then.empty() && then != now)
      throw UsageError(detail::str("--eval-only: the checkpoint '", a.resume, "' was trained on ", then, " data, and --data '",
                                   files.source(), "' is ", now, ": its tokens would not be the model's; score it on ",
                                   then, " data"));
  }
  if (s.resumed && !a.eval_only) {
    try {
      data::check_sizes_match_record(s.resumed->metadata, files, "--data '" + files.source() + "'");
    } catch (const Error& e) {
      throw UsageError(std::string("--resume: ") + e.what());
    }
  }
  // The tokenizer decodes the samples: ids past its vocabulary came from another tokenizer (with
  // --vocab-size large enough, it trained and sampled placeholders such as <|266|>).
  if (s.tok && files.format() != data::TokenFormat::Bytes)
    if (const int64_t largest = files.largest_id(); largest >= s.tok->vocab_size())
      throw UsageError(detail::str("--tokenizer: its vocabulary has ", s.tok->vocab_size(), " tokens, and --data '",
                                   files.source(), "' holds ids up to ", largest,
                                   ": it is not the tokenizer that made these shards"));
  try {  // checks every token id against the model's vocabulary (naming the file, the position, the id)
    s.ds = std::make_unique<data::TokenDataset>(
        std::move(files), data::TokenDatasetOptions{.batch_size = a.batch, .seq_len = a.seq,
                                                    .val_fraction = a.eval_only ? 0.0 : a.val_fraction,
                                                    .val_required = a.eval_every > 0,
                                                    .seed = a.seed, .rank = comm.rank(), .world_size = comm.size(),
                                                    .vocab_size = s.cfg.vocab_size});
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  // A step draws --batch x --seq x --grad-accum tokens. More than the training split holds is a
  // typo's size (and --grad-accum 1000000000 would hold a loss slot per micro-batch in memory).
  const double per_step = static_cast<double>(a.batch) * static_cast<double>(a.seq) * static_cast<double>(a.grad_accum);
  const int64_t train_tokens = s.ds->split_size(data::Split::Train);
  if (!a.eval_only && per_step > static_cast<double>(train_tokens))
    throw UsageError(detail::str("one step would draw ", per_step, " tokens (--batch ", a.batch, " x --seq ", a.seq,
                                 " x --grad-accum ", a.grad_accum, "), more than the ", train_tokens,
                                 " of the training split: lower them, or train on more data"));
}

// Checked before any training (not when the first save comes, hours later): only rank 0
// probes --save, only some ranks open a metrics file.
void open_outputs(Args& a, const CLI::App& app, Setup& s, const dist::Communicator& comm) {
  // Flags that would do nothing in this run are refused rather than silently ignored.
  if (!a.save.empty() && a.eval_only)
    throw UsageError("--save writes the training's checkpoints, and --eval-only trains nothing: drop one of them");
  if (a.metrics_all_ranks && a.metrics.empty())
    throw UsageError("--metrics-all-ranks names each rank's copy of the --metrics file: give --metrics FILE too");
  if (a.stop_after > a.steps)
    throw UsageError(detail::str("--stop-after ", a.stop_after, " is beyond --steps ", a.steps,
                                 ": the run ends at step ", a.steps, " anyway"));
  if (given(app, "--save-every") && a.save_every > 0 && a.save.empty())
    throw UsageError(detail::str("--save-every ", a.save_every, " saves checkpoints into --save DIR: give --save too "
                                 "(without it nothing is saved)"));
  for (const char* flag : {"--save-every", "--stop-after"})
    if (given(app, flag) && a.eval_only)
      throw UsageError(std::string(flag) + " applies to training, and --eval-only trains nothing: drop one of them");
  // Ignoring it would score another part of the data than asked for (the whole file).
  if (given(app, "--val-fraction") && a.eval_only)
    throw UsageError("--eval-only scores the whole --data from its start, and --val-fraction holds out part of the "
                     "training data for --eval-every: to score held-out text, give that text as --data");
  for (const char* flag : {"--temperature", "--top-k", "--prompt"})
    if (given(app, flag) && a.sample == 0)
      throw UsageError(std::string(flag) + " shapes the text of --sample N, and no sample is asked for: give --sample "
                                           "N, or drop " + flag);
  if (given(app, "--nan-skip-limit") && a.on_nan != "skip")
    throw UsageError("--nan-skip-limit counts the steps --on-nan skip skips: give --on-nan skip, or drop it");
  if (given(app, "--eval-batches") && a.eval_every == 0 && !a.eval_only)
    throw UsageError("--eval-batches sizes each validation, and --eval-every 0 runs none: give --eval-every N, or drop "
                     "--eval-batches");
  if (given(app, "--eval-every") && a.eval_every > 0 && a.val_fraction == 0 && !a.eval_only)
    throw UsageError(detail::str("--eval-every ", a.eval_every, " validates on the held-out split, and --val-fraction 0 ",
                                 "holds none out: give --val-fraction above 0, or --eval-every 0"));
  try {
    // A symbolic link stands for its target, on every rank: the save swaps the target into place
    // (not a new directory over the link), and the lock is the target's.
    if (!a.save.empty()) a.save = io::directory_link_target(a.save);
    if (comm.rank() == 0 && !a.save.empty()) {
      io::check_checkpoint_destination(a.save, "layout.json");
      s.save_lock = std::make_unique<io::DirLock>(a.save);  // a second run on it is refused here
    }
  } catch (const Error& e) {
    throw UsageError(std::string("--save: ") + e.what());
  }
  if (!a.export_hf.empty() && a.eval_only)
    throw UsageError("--export-hf writes the model after training, and --eval-only trains nothing; to export a "
                     "checkpoint, run consolidate_checkpoint CHECKPOINT_DIR OUT_DIR");
  try {  // writable, with room for the model's file, and not another run's
    if (comm.rank() == 0 && !a.export_hf.empty()) {
      // A symbolic link stands for its target: that is what the export replaces, and locks.
      a.export_hf = io::check_hf_dir_destination(a.export_hf, io::gpt2_file_bytes(s.cfg, s.dtype));
      if (!io::DirLock::held_here(a.export_hf)) s.export_lock = std::make_unique<io::DirLock>(a.export_hf);
    }
  } catch (const Error& e) {
    throw UsageError(std::string("--export-hf: ") + e.what());
  }
  try {
    s.metrics = std::make_unique<io::MetricsLog>(a.metrics, comm.rank(), a.metrics_all_ranks);
  } catch (const Error& e) {
    throw UsageError(std::string("--metrics: ") + e.what());
  }
}

// The layout flags against where the ranks are (docs/multinode.md).
void check_layout(const Args& a, const dist::Communicator& comm) {
  const char* flag = a.secondary_partition ? "--secondary-partition" : a.quantize_grads != "none" ? "--quantize-grads" : nullptr;
  if (flag == nullptr) return;
  const int K = a.shard_group > 0 ? a.shard_group : comm.size();
  const std::vector<int> nodes = comm.nodes();
  if (nodes.front() == nodes[static_cast<size_t>(K - 1)])  // the first group (all alike under a block layout)
    throw UsageError(detail::str(flag, " keeps traffic within a node, but the ", K,
                                 " ranks sharding the states are on one node already",
                                 a.shard_group > 0 ? " (the shard group is a node)"
                                                   : " (to pose the ranks as nodes: --ranks-per-node)"));
}

}  // namespace

Setup configure(Args& a, const CLI::App& app, dist::Communicator& comm, Device dev) {
  Setup s;
  io::agree_on_usage(comm, [&] {
    // An empty path is a slip (an unset shell variable), not "the default": --data '' would train
    // on the built-in corpus.
    for (const char* flag : {"--data", "--resume", "--init-from", "--tokenizer", "--save", "--export-hf", "--metrics",
                             "--offload-dir"})
      if (given(app, flag) && app.get_option(flag)->as<std::string>().empty())
        throw UsageError(std::string(flag) + " is empty: give a path");
    if (given(app, "--resume")) s.resumed_with_other = read_checkpoint_state(a, app, s.resumed);
    data::TokenFiles files = open_data(a, s, s.resumed && !given(app, "--data") && !a.data.empty());
    check_model(a, app, s, files, comm.size(), comm.local_size(), dev);
    check_layout(a, comm);
    open_dataset(a, s, std::move(files), comm);
    open_outputs(a, app, s, comm);
  });
  return s;
}

void check_same_data_on_every_rank(const data::DataFingerprint& fp, int64_t num_files, dist::Communicator& comm) {
  const auto sizes = comm.all_gather_i64(fp.size);
  const auto sums = comm.all_gather_i64(static_cast<int64_t>(fp.fnv1a));
  const auto counts = comm.all_gather_i64(num_files);
  auto read = [&](size_t r) {
    return detail::str(sizes[r], " bytes (", counts[r], counts[r] == 1 ? " file" : " files", ", fnv1a ",
                       io::hex64(static_cast<uint64_t>(sums[r])), ")");
  };
  for (size_t r = 1; r < sizes.size(); ++r)
    if (sizes[r] != sizes[0] || sums[r] != sums[0] || counts[r] != counts[0])
      throw UsageError(detail::str("ranks disagree on the data: rank 0 read ", read(0), ", rank ", r, " read ", read(r),
                                   " from --data; every rank must train on the same files"));
}

}  // namespace zdl::train_gpt

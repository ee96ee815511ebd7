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
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "data/bpe_tokenizer.h"
#include "data/byte_tokenizer.h"
#include "data/default_corpus.h"
#include "data/llmc_shard.h"
#include "data/token_dataset.h"
#include "dist/communicator.h"
#include "dist/metrics.h"
#include "dist/sharded_checkpoint.h"
#include "dist/trainer.h"
#include "dist/zero.h"
#include "dist/zero_optimizer.h"
#include "io/program_main.h"
#include "io/checkpoint_dir.h"
#include "io/gpt2_format.h"
#include "io/metrics_log.h"
#include "io/progress.h"
#include "nn/activation_checkpoint.h"
#include "nn/gpt.h"
#include "nn/sampling.h"
#include "optim/schedule.h"

using namespace zdl;
using json = nlohmann::json;

namespace {

struct Args {
  std::string data;
  int64_t steps = 300;
  int64_t batch = 16;
  int64_t seq = 64;
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  int64_t vocab_multiple = 1;
  double lr = 3e-3;
  double min_lr_ratio = 0.1;
  int64_t warmup = 30;
  double weight_decay = 0.1;
  double grad_clip = 1.0;
  double dropout = 0.0;
  int64_t activation_checkpointing = 0;  // recompute blocks 0, k, 2k, ... in backward (0: off)
  uint64_t seed = 1337;
  int64_t grad_accum = 1;
  int64_t eval_every = 100;
  int64_t eval_batches = 20;
  double val_fraction = 0.1;
  std::string save;
  std::string export_hf;  // a Hugging Face directory of the model, written at the end
  int64_t save_every = 0;
  int64_t stop_after = 0;
  std::string resume;
  std::string init_from;
  bool eval_only = false;
  int64_t sample = 0;
  std::string prompt = "\n";
  double temperature = 0.8;
  int64_t top_k = 40;
  std::string metrics;
  bool metrics_all_ranks = false;
  int64_t log_every = 0;
  int zero_stage = 0;
  std::string dtype = "f32";
  int prefetch = 1;
  int64_t max_memory_per_rank = 0;
  double collective_timeout = 0;
  std::string on_nan = "stop";
  std::string reduction = "exact";
  int64_t nan_skip_limit = 10;
  std::string fault_nan_grad;  // test hook "STEP:PARAM" (hidden flag)
  std::string device = "cpu";
  std::string dist_backend = "auto";
  double peak_tflops = 0;  // 0: from the GPU's name
  int64_t vocab_size = 0;  // 0: the data's (bytes: 256; llm.c shards: the tokenizer's, or GPT-2's 50257)
  std::string tokenizer;   // BPE files of the shards' tokens: --prompt and --sample on them
};

using io::UsageError;

// "step 7: loss nan, non-finite gradients in h.1 (on 1 of 2 ranks), <root> (on 2 of 2 ranks)".
std::string nonfinite_report(const dist::StepResult& r, int64_t step, int world) {
  std::string s = detail::str("step ", step + 1, ": loss ", r.loss, ", ");
  if (r.nonfinite.empty()) return s + "gradients finite";
  s += "non-finite gradients in ";
  for (size_t i = 0; i < r.nonfinite.size(); ++i)
    s += detail::str(i ? ", " : "", r.nonfinite[i].name, " (on ", r.nonfinite[i].ranks, " of ", world, " ranks)");
  return s;
}

// A sample as text: each id's bytes, and <|id|> for an id beyond the tokenizer's vocabulary (a
// model's can be larger: --vocab-size, a checkpoint's).
std::string sample_text(const data::BpeTokenizer& tok, const std::vector<int64_t>& ids) {
  std::string text;
  for (int64_t id : ids) text += id < tok.vocab_size() ? tok.decode({id}) : detail::str("<|", id, "|>");
  return text;
}

// Test hook for the NaN handling (hidden flag --fault-nan-grad STEP:PARAM): at that step (1-based)
// the last rank's gradient of PARAM gets a NaN before any reduction, as a numeric blow-up would.
void install_fault_nan_grad(const std::string& spec, nn::Module& model, dist::Communicator& comm,
                            const int64_t* current_step) {
  if (spec.empty()) return;
  auto colon = spec.find(':');
  int64_t at = 0;
  try {
    at = std::stoll(spec.substr(0, colon));
  } catch (const std::exception&) {
    colon = std::string::npos;
  }
  if (colon == std::string::npos) throw UsageError("--fault-nan-grad: expected STEP:PARAM, got '" + spec + "'");
  std::string name = spec.substr(colon + 1);
  auto params = model.named_parameters();
  auto it = std::find_if(params.begin(), params.end(), [&](const auto& np) { return np.first == name; });
  if (it == params.end()) throw UsageError("--fault-nan-grad: the model has no parameter '" + name + "'");
  if (comm.rank() != comm.size() - 1) return;
  it->second.register_hook([at, current_step](const Tensor& g) {
    if (*current_step + 1 != at) return g;
    Tensor bad = g.to(Device::cpu()).contiguous_copy();  // a GPU gradient is poisoned on the host
    if (bad.dtype() == DType::BF16) bad.data<BFloat16>()[0] = BFloat16(std::nanf(""));
    else bad.data<float>()[0] = std::nanf("");
    return bad.to(g.device());
  });
}

// A model whose states alone cannot fit in this machine's memory (or its GPU's) cannot work:
// said at startup, not by a failed allocation (or the OOM killer) part way through building it.
// The bound is the least any ZeRO stage needs on one rank: 16 bytes per parameter (value,
// gradient, two Adam moments) over N ranks, plus one micro-batch's logits and their gradient.
void check_model_fits_in_memory(const nn::GPTConfig& c, const Args& a, int world, Device dev) {
  const double V = static_cast<double>(c.padded_vocab());
  const double params = c.num_parameters();
  const double logits = static_cast<double>(std::max<int64_t>(1, a.batch / world)) * static_cast<double>(a.seq) * V * 8;
  const double need = 16 * params / world + logits;
  const double have = static_cast<double>(device_info(dev).total_bytes);
  constexpr double GiB = 1024.0 * 1024.0 * 1024.0;
  if (have > 0 && need > have)
    throw UsageError(detail::str("the model (n_layer ", c.n_layer, ", n_embd ", c.n_embd, ", context ", c.block_size, ": ",
                                 params, " parameters) with --batch ", a.batch, " x --seq ", a.seq, " needs at least ",
                                 need / GiB, " GiB per rank (states ", 16 * params / world / GiB, " GiB over ", world,
                                 " rank(s), logits ", logits / GiB, " GiB), more than ",
                                 dev.is_cuda() ? "this GPU's " : "this machine's ", have / GiB,
                                 " GiB; choose a smaller model or batch, or more ranks"));
}

// The checkpoint's record of its data (metadata "data"): the --data source, the format, and each
// file's path, tokens and fingerprint in reading order, so a resume names the file that changed.
std::string data_record(const data::TokenFiles& files, const std::vector<data::DataFingerprint>& fps) {
  json list = json::array();
  for (size_t i = 0; i < fps.size(); ++i)
    list.push_back({{"path", files.files()[i].mapped.path()},
                    {"tokens", files.files()[i].count},
                    {"fingerprint", fps[i].to_string()}});
  return json{{"source", files.source()}, {"format", data::format_name(files.format())}, {"files", list}}.dump();
}

// The fingerprints of the files a checkpoint was trained on, in reading order: from its data
// record, or (a checkpoint from before shards) its one file's; none if it has neither.
std::vector<data::DataFingerprint> saved_data_files(const io::TrainState& st) {
  std::vector<data::DataFingerprint> saved;
  try {
    if (auto it = st.metadata.find("data"); it != st.metadata.end()) {
      const json record = json::parse(it->second);
      for (const json& f : record.at("files"))
        saved.push_back(data::DataFingerprint::parse(f.at("fingerprint").get<std::string>()));
    } else if (auto fp = st.metadata.find("data_fingerprint"); fp != st.metadata.end()) {
      saved.push_back(data::DataFingerprint::parse(fp->second));
    }
  } catch (const std::exception& e) {
    throw UsageError(std::string("--resume: the checkpoint's record of its data is unreadable: ") + e.what());
  }
  return saved;
}

// --resume on data of another size, said plainly (another number of files; a file shorter or
// longer, both sizes) before the dataset is opened, which would otherwise at best say the data
// are too small for a batch.
void check_data_sizes(const io::TrainState& st, const data::TokenFiles& files) {
  const auto saved = saved_data_files(st);
  const auto& now = files.files();
  if (saved.empty()) return;
  if (saved.size() != now.size())
    throw UsageError(detail::str("--resume: --data '", files.source(), "' reads ", now.size(), " file(s) now, ",
                                 saved.size(), " when the checkpoint was saved; resume on the data the run was "
                                 "trained on"));
  for (size_t i = 0; i < now.size(); ++i) {
    const int64_t size = now[i].mapped.size(), then = saved[i].size;
    if (size == then) continue;
    throw UsageError(detail::str("--resume: the data file '", now[i].mapped.path(), "'",
                                 now.size() > 1 ? detail::str(" (file ", i + 1, " of ", now.size(), ")") : "", " is ",
                                 size < then ? "shorter" : "longer", " than when the checkpoint was saved (", size,
                                 " bytes now, ", then, " then): it changed since the checkpoint; resume on the data "
                                 "the run was trained on"));
  }
}

// --resume on data whose fingerprint changed: refused, naming the first file that differs.
void check_data_unchanged(const io::TrainState& st, const data::TokenFiles& files,
                          const std::vector<data::DataFingerprint>& fps) {
  const std::string now = data::combine(fps).to_string();
  const auto saved = st.metadata.find("data_fingerprint");
  if (saved != st.metadata.end() && saved->second == now) return;
  auto changed = [](const std::string& what, const std::string& then, const std::string& is) {
    return UsageError("--resume: " + what + " changed since the checkpoint (saved " + then + ", now " + is +
                      "); resume on the data the run was trained on");
  };
  const auto saved_files = saved_data_files(st);
  for (size_t i = 0; i < saved_files.size() && i < fps.size(); ++i)
    if (saved_files[i] != fps[i])
      throw changed("the data file '" + files.files()[i].mapped.path() + "'", saved_files[i].to_string(),
                    fps[i].to_string());
  throw changed("--data '" + files.source() + "'", saved == st.metadata.end() ? "nothing" : saved->second, now);
}

// What the flags and files make of a run: the model, the data, the checkpoint it resumes.
struct Setup {
  std::optional<io::TrainState> resumed;
  nn::GPTConfig cfg;
  DType dtype = DType::F32;
  std::string data_path;  // --data: a file or a pattern
  std::unique_ptr<data::TokenDataset> ds;
  std::unique_ptr<io::MetricsLog> metrics;
  std::optional<data::BpeTokenizer> tok;  // --tokenizer
};

// The model's config: the checkpoint's (--resume), the GPT-2 file's (--init-from) or the flags'
// (a new model's vocabulary is the data's: 256 bytes; for llm.c shards the --tokenizer's
// (`tokenizer_vocab` > 0), else GPT-2's 50257, padded to a multiple of 128 as llm.c does). A
// shape flag that disagrees with a checkpoint or a file is refused, never silently ignored.
nn::GPTConfig model_config(Args& a, const CLI::App& app, std::optional<io::TrainState>& resumed,
                           data::TokenFormat format, int64_t tokenizer_vocab) {
  auto given = [&](const char* flag) { return app.count(flag) > 0; };
  nn::GPTConfig cfg;
  if (!a.resume.empty()) {
    if (!std::filesystem::exists(a.resume)) throw UsageError("--resume: no checkpoint at '" + a.resume + "'");
    uint64_t saved_seed = 0;
    try {
      resumed = dist::read_sharded_train_state(a.resume);
      cfg = io::gpt_config_from_json(resumed->metadata.at("config"), "the checkpoint's model config");
      // The run's seed fixes init, data order and dropout: a resumed run keeps its own.
      saved_seed = std::stoull(resumed->metadata.at("seed"));
    } catch (const std::exception& e) {
      throw UsageError(std::string("--resume: ") + e.what());
    }
    if (given("--seed") && a.seed != saved_seed)
      throw UsageError(detail::str("--seed ", a.seed, " differs from the checkpoint's seed ", saved_seed,
                                   " (a resumed run keeps its seed: data order and dropout depend on it; drop the flag)"));
    a.seed = saved_seed;
    if (!a.init_from.empty()) throw UsageError("--init-from and --resume exclude each other (the checkpoint holds the weights)");
    // The model comes from the checkpoint: a shape flag that disagrees would be silently ignored.
    auto check_flag = [&](const char* flag, auto flag_value, auto saved_value) {
      if (given(flag) && flag_value != saved_value)
        throw UsageError(detail::str(flag, " ", flag_value, " differs from ", saved_value, " in the checkpoint '",
                                     a.resume, "' (a resumed run keeps its model; drop the flag)"));
    };
    check_flag("--n-layer", a.n_layer, cfg.n_layer);
    check_flag("--n-head", a.n_head, cfg.n_head);
    check_flag("--n-embd", a.n_embd, cfg.n_embd);
    check_flag("--dropout", a.dropout, cfg.dropout);
    check_flag("--vocab-size", a.vocab_size, cfg.vocab_size);
    if (given("--vocab-multiple") &&
        (a.vocab_multiple > 1 ? data::padded_vocab(cfg.vocab_size, a.vocab_multiple) : cfg.vocab_size) != cfg.padded_vocab())
      throw UsageError(detail::str("--vocab-multiple ", a.vocab_multiple, " does not give the checkpoint's padded vocabulary ",
                                   cfg.padded_vocab(), " ('", a.resume, "'; drop the flag)"));
  } else if (!a.init_from.empty()) {
    if (!std::filesystem::exists(a.init_from)) throw UsageError("--init-from: no file '" + a.init_from + "'");
    if (std::filesystem::is_directory(a.init_from)) {
      // A Hugging Face-style directory (consolidate_checkpoint CK DIR) holds the weights here.
      const std::string weights = (std::filesystem::path(a.init_from) / io::kHfWeightsFile).string();
      if (!std::filesystem::exists(weights))
        throw UsageError("--init-from: '" + a.init_from + "' is a directory without " + io::kHfWeightsFile +
                         "; it takes a GPT-2 safetensors file or such a directory (continue a sharded checkpoint "
                         "with --resume, or consolidate it with consolidate_checkpoint)");
      a.init_from = weights;
    }
    io::GPT2ConfigOverrides ov;
    if (given("--n-head")) ov.n_head = a.n_head;
    ov.dropout = a.dropout;
    try {
      cfg = io::config_from_gpt2_file(a.init_from, ov);
    } catch (const std::exception& e) {  // not a GPT-2 file: a checkpoint directory, another model's file
      throw UsageError(std::string("--init-from: ") + e.what());
    }
    auto check_flag = [&](const char* flag, int64_t flag_value, int64_t file_value) {
      if (given(flag) && flag_value != file_value)
        throw UsageError(detail::str(flag, " ", flag_value, " differs from ", file_value, " in ", a.init_from));
    };
    check_flag("--n-layer", a.n_layer, cfg.n_layer);
    check_flag("--n-embd", a.n_embd, cfg.n_embd);
    check_flag("--vocab-size", a.vocab_size, cfg.vocab_size);
  } else {
    const bool gpt2 = format == data::TokenFormat::Llmc;
    cfg.vocab_size = a.vocab_size > 0       ? a.vocab_size
                     : tokenizer_vocab > 0 ? tokenizer_vocab
                     : gpt2                ? data::kGpt2VocabSize
                                           : data::ByteTokenizer::kVocabSize;
    const int64_t multiple = given("--vocab-multiple") ? a.vocab_multiple : gpt2 ? data::kGpt2VocabMultiple : 1;
    cfg.padded_vocab_size = multiple > 1 ? data::padded_vocab(cfg.vocab_size, multiple) : 0;
    cfg.block_size = a.seq;
    cfg.n_layer = a.n_layer;
    cfg.n_head = a.n_head;
    cfg.n_embd = a.n_embd;
    cfg.dropout = a.dropout;
  }
  return cfg;
}

// Every flag and file checked before anything trains (errors are the user's input: exit 2).
// Every rank checks its own input (a path, a file, a checkpoint may differ between hosts) and
// the ranks agree on the outcome: a problem on one rank ends every rank at once with that
// rank's message ([Note: ranks that disagree] in io/program_flags.h), not a hang in the
// first collective the failed rank never joins.
Setup configure(Args& a, const CLI::App& app, dist::Communicator& comm, Device dev) {
  auto given = [&](const char* flag) { return app.count(flag) > 0; };
  Setup s;
  io::agree_on_usage(comm, [&] {
    // Every rank makes the default corpus itself (atomic write): no shared file system needed.
    s.data_path = a.data.empty() ? data::default_corpus_file() : a.data;
    if (!data::is_glob_pattern(s.data_path) && !std::filesystem::exists(s.data_path))
      throw UsageError("--data: no file '" + s.data_path + "'");
    std::optional<data::TokenFiles> files;
    try {
      files.emplace(s.data_path);
    } catch (const Error& e) {
      throw UsageError(std::string("--data: ") + e.what());
    }
    const bool gpt2_tokens = files->format() == data::TokenFormat::Llmc;
    if (!a.tokenizer.empty()) {
      if (!gpt2_tokens)
        throw UsageError("--tokenizer: the data are text, whose bytes are the tokens; encode the text into token "
                         "shards with prepare_tokens and train on those (--data 'PREFIX_train_*.bin')");
      try {
        s.tok.emplace(data::BpeTokenizer::load(a.tokenizer));
      } catch (const Error& e) {
        throw UsageError(std::string("--tokenizer: ") + e.what());
      }
    }
    nn::GPTConfig& cfg = s.cfg;
    std::optional<io::TrainState>& resumed = s.resumed;
    cfg = model_config(a, app, resumed, files->format(), s.tok ? s.tok->vocab_size() : 0);
    try {
      cfg.validate();
    } catch (const Error& e) {
      throw UsageError(e.what());
    }
    if (a.seq > cfg.block_size)
      throw UsageError(detail::str("--seq ", a.seq, " exceeds the model's context length ", cfg.block_size,
                                   resumed ? " (the checkpoint's model)" : !a.init_from.empty() ? " (the --init-from file's)" : ""));
    if (given("--prefetch") && a.zero_stage != 3)
      throw UsageError(detail::str("--prefetch applies to --zero-stage 3 only (got --zero-stage ", a.zero_stage, ")"));
    if (given("--peak-tflops") && !dev.is_cuda())
      throw UsageError("--peak-tflops applies to --device cuda only (MFU is reported for GPUs)");
    if (s.tok && s.tok->vocab_size() > cfg.vocab_size)
      throw UsageError(detail::str("--tokenizer: its vocabulary (", s.tok->vocab_size(), " tokens) is larger than the "
                                   "model's (", cfg.vocab_size, resumed ? ", the checkpoint's" : "",
                                   "): it is not the tokenizer of this model"));
    // Sampling encodes the prompt and decodes the sample: as bytes on text, with --tokenizer on shards.
    const char* sampling = a.sample > 0 ? "--sample" : given("--prompt") ? "--prompt" : nullptr;
    if (sampling && gpt2_tokens && !s.tok)
      throw UsageError(detail::str(sampling, ": the data are token ids (llm.c shards); give the tokenizer that made "
                                   "them with --tokenizer (GPT-2's encoder.json + vocab.bpe, or a .tiktoken file) to "
                                   "encode the prompt and decode the sample, or drop ", sampling));
    if (sampling && !gpt2_tokens && cfg.vocab_size != data::ByteTokenizer::kVocabSize)
      throw UsageError(detail::str(sampling, " on text works in bytes: it needs the byte vocabulary 256, not ",
                                   cfg.vocab_size, " (--vocab-size larger than 256 is for measuring speed; a BPE "
                                   "vocabulary needs token shards from prepare_tokens and --tokenizer)"));
    if (sampling && s.tok && !s.tok->eot_id() && (!given("--prompt") || a.prompt.empty()))
      throw UsageError(detail::str(sampling, ": the tokenizer has no <|endoftext|> to start a sample from; give a "
                                   "--prompt"));
    if (sampling && !s.tok && given("--prompt") && a.prompt.empty())
      throw UsageError(detail::str(sampling, ": --prompt is empty; on bytes a sample starts from at least one (leave "
                                   "--prompt out to start from a newline)"));
    check_model_fits_in_memory(cfg, a, comm.size(), dev);
    if (!gpt2_tokens && cfg.vocab_size < data::ByteTokenizer::kVocabSize)
      throw UsageError(detail::str("the model's vocabulary (", cfg.vocab_size, ") is smaller than the byte tokenizer's 256"));
    if (a.batch % comm.size() != 0)
      throw UsageError(detail::str("--batch ", a.batch, " must be divisible by the number of ranks ", comm.size(),
                                   " (each rank takes batch/N rows of the global batch)"));
    try {
      s.dtype = dtype_from_name(a.dtype);
    } catch (const Error& e) {
      throw UsageError(std::string("--dtype: ") + e.what());
    }
    if (s.dtype != DType::F32 && s.dtype != DType::BF16) throw UsageError("--dtype must be f32 or bf16, got " + a.dtype);

    if (resumed && !a.eval_only) check_data_sizes(*resumed, *files);
    try {  // checks every token id against the model's vocabulary (naming the file, the position, the id)
      s.ds = std::make_unique<data::TokenDataset>(
          std::move(*files), data::TokenDatasetOptions{.batch_size = a.batch, .seq_len = a.seq,
                                                       .val_fraction = a.eval_only ? 0.0 : a.val_fraction,
                                                       .seed = a.seed, .rank = comm.rank(), .world_size = comm.size(),
                                                       .vocab_size = cfg.vocab_size});
    } catch (const Error& e) {
      throw UsageError(e.what());
    }
    // Checked before any training (not when the first save comes, hours later): only rank 0
    // probes --save, only some ranks open a metrics file.
    try {
      if (comm.rank() == 0 && !a.save.empty()) io::check_checkpoint_destination(a.save, "layout.json");
    } catch (const Error& e) {
      throw UsageError(std::string("--save: ") + e.what());
    }
    if (!a.export_hf.empty() && a.eval_only)
      throw UsageError("--export-hf writes the model after training, and --eval-only trains nothing; to export a "
                       "checkpoint, run consolidate_checkpoint CHECKPOINT_DIR OUT_DIR");
    try {
      if (comm.rank() == 0 && !a.export_hf.empty()) io::check_hf_dir_destination(a.export_hf);
    } catch (const Error& e) {
      throw UsageError(std::string("--export-hf: ") + e.what());
    }
    try {
      s.metrics = std::make_unique<io::MetricsLog>(a.metrics, comm.rank(), a.metrics_all_ranks);
    } catch (const Error& e) {
      throw UsageError(std::string("--metrics: ") + e.what());
    }
  });
  return s;
}

// Every rank must read the same data: the same files' bytes, wherever its copies live.
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

// The run's description: on the console (rank 0) and as the metrics log's first line.
void announce(const Args& a, const Setup& s, const nn::GPT& model, const dist::ZeroPartitioner& zero,
              dist::Communicator& comm, Device dev, const DeviceInfo& gpu, int64_t first_step) {
  const bool lead = comm.rank() == 0;
  auto say = [&](const std::string& m) {
    if (lead) std::printf("%s\n", m.c_str());
  };
  say(detail::str("zerodl train_gpt: ", model.extra_repr()));
  if (dev.is_cuda())
    say(detail::str("device ", dev.str(), " on rank 0 (", gpu.name, ", ", format_bytes(gpu.total_bytes), ", peak bf16 ",
                    gpu.peak_bf16_tflops > 0 ? detail::str(gpu.peak_bf16_tflops, " TFLOP/s") : std::string("unknown: no MFU"),
                    ") | rank r on GPU local_rank % ", cuda_device_count(), " | collectives ",
                    comm.backend() == "nccl" ? "NCCL" : comm.size() > 1 ? "MPI, staged through host memory" : "local"));
  say(detail::str("params ", model.num_parameters(), " | ranks ", comm.size(), " (", comm.backend(), ") | ",
                  dist::stage_name(zero.stage()), " | ", dtype_name(s.dtype), " | data ", s.data_path, " (",
                  s.ds->num_tokens(), " tokens, ", data::format_name(s.ds->files().format()),
                  s.ds->files().files().size() > 1 ? detail::str(", ", s.ds->files().files().size(), " files") : "",
                  ") | batch ", a.batch, " x ", a.seq, " x accum ", a.grad_accum,
                  " | steps ", a.steps));
  if (s.tok) say(detail::str("tokenizer ", s.tok->source(), " (", s.tok->vocab_size(), " tokens)"));
  if (s.resumed) say(detail::str("resumed from ", a.resume, " at step ", first_step));
  s.metrics->write({{"type", "config"},
                    {"params", model.num_parameters()},
                    {"params_padded", zero.num_padded()},
                    {"model", json::parse(io::gpt_config_to_json(s.cfg))},
                    {"data", s.data_path},
                    {"data_format", data::format_name(s.ds->files().format())},
                    {"data_files", s.ds->files().files().size()},
                    {"world_size", comm.size()},
                    {"rank", comm.rank()},
                    {"zero_stage", a.zero_stage},
                    {"dtype", dtype_name(s.dtype)},
                    {"device", dev.str()},
                    {"gpu", dev.is_cuda() ? gpu.name : ""},
                    {"peak_tflops", gpu.peak_bf16_tflops},
                    {"backend", comm.backend()},
                    {"steps", a.steps},
                    {"batch", a.batch},
                    {"seq", a.seq},
                    {"grad_accum", a.grad_accum},
                    {"lr", a.lr},
                    {"warmup", a.warmup},
                    {"seed", a.seed},
                    {"start_step", first_step}});
}

int run(const Args& args, const CLI::App& app, dist::Communicator& comm) {
  Args a = args;
  const bool lead = comm.rank() == 0;
  // This rank's device: its GPU (local rank % device count, made current by dist::init) or the CPU.
  const Device dev = a.device == "cuda" ? comm.device() : Device::cpu();
  DeviceInfo gpu = dev.is_cuda() ? device_info(dev) : DeviceInfo{};
  if (a.peak_tflops > 0) gpu.peak_bf16_tflops = a.peak_tflops;
  Setup s = configure(a, app, comm, dev);
  data::TokenDataset& ds = *s.ds;
  const std::vector<data::DataFingerprint> file_fps = ds.files().file_fingerprints();
  const data::DataFingerprint data_fp = data::combine(file_fps);
  check_same_data_on_every_rank(data_fp, static_cast<int64_t>(file_fps.size()), comm);
  io::MetricsLog& metrics = *s.metrics;

  // ---- the model, placed by the partition manager ----
  if (a.max_memory_per_rank > 0) memory_ledger().set_cap(dev.type, a.max_memory_per_rank);
  auto shared_comm = std::shared_ptr<dist::Communicator>(&comm, [](dist::Communicator*) {});
  dist::ZeroPartitioner zero(shared_comm, dist::ZeroOptions{.stage = dist::stage_from_int(a.zero_stage),
                                                            .compute_dtype = s.dtype,
                                                            .device = dev,
                                                            .prefetch = a.prefetch,
                                                            .reduction = a.reduction == "exact"
                                                                             ? dist::GradReduction::Exact
                                                                             : dist::GradReduction::Native});
  std::shared_ptr<nn::GPT> model;
  {
    auto scope = zero.placement_scope(a.seed);
    model = std::make_shared<nn::GPT>(s.cfg);
  }
  nn::checkpoint_every(model->h, a.activation_checkpointing);  // the same bits, less memory
  zero.wrap(*model);
  if (!a.init_from.empty() && !s.resumed) {
    // Each rank reads its own copy of the file (paths may differ between hosts): agreed, so a
    // bad copy on one rank ends every rank with its message. Running out of memory is no input
    // error: it takes the failure path (exit 1).
    io::agree_on_usage(comm, [&] {
      try {
        dist::GatheredParameters g(zero, /*modify=*/true);
        io::load_gpt2(*model, a.init_from);
      } catch (const OutOfMemoryError&) {
        throw;
      } catch (const Error& e) {
        throw UsageError(std::string("--init-from: ") + e.what());
      }
    });
  }
  dist::ZeroAdamW opt(zero, {.lr = a.lr, .beta1 = 0.9, .beta2 = 0.95}, a.weight_decay);
  dist::Trainer trainer(zero, opt,
                        {.grad_accum = a.grad_accum, .micro_batch = a.batch / comm.size(), .grad_clip = a.grad_clip,
                         .seed = a.seed});
  auto gpt_loss = [&](const Tensor& x, const Tensor& y) { return model->loss(x, y); };
  auto evaluate = [&](data::Split split, int64_t n) {
    n = std::min(n, ds.num_eval_batches(split));
    if (n <= 0) throw Error(detail::str("evaluation: the ", data::split_name(split), " split holds fewer than one batch of tokens"));
    auto rows = [&](int64_t i) {
      data::Batch b = ds.eval_batch(split, i);
      return dist::Trainer::Batch{b.inputs.to(dev), b.targets.to(dev)};
    };
    return std::make_pair(trainer.evaluate(*model, n, rows, gpt_loss), n);
  };

  // ---- a checkpoint's states: weights and Adam moments; the step fixes data and dropout ----
  int64_t first_step = 0;
  if (s.resumed) {
    io::agree_on_usage(comm, [&] {  // each rank's copy of the checkpoint: agreed
      if (!a.eval_only) check_data_unchanged(*s.resumed, ds.files(), file_fps);
    });
    try {  // collective, and agreed: a bad checkpoint on any rank fails every rank with its message
      *s.resumed = dist::load_sharded(a.resume, zero, opt);
    } catch (const OutOfMemoryError&) {
      throw;
    } catch (const Error& e) {
      throw UsageError(std::string("--resume: ") + e.what());
    }
    first_step = s.resumed->step;
    ds.set_position(first_step);
    io::agree_on_usage(comm, [&] {
      if (!a.eval_only && a.stop_after > 0 && a.stop_after <= first_step)
        throw UsageError(detail::str("--stop-after ", a.stop_after, " is not after the checkpoint's step ", first_step,
                                     ": nothing would be trained"));
    });
  }
  if (a.eval_only) {  // the weights (a checkpoint's, a GPT-2 file's or fresh ones) on any data
    const auto [loss, n] = evaluate(data::Split::Train, a.eval_batches > 0 ? a.eval_batches : ds.num_eval_batches(data::Split::Train));
    if (lead) std::printf("loss %.6f\n", loss);
    metrics.write({{"type", "eval"}, {"loss", loss}, {"batches", n}});
    return 0;
  }
  announce(a, s, *model, zero, comm, dev, gpu, first_step);
  auto save = [&](int64_t step) {
    io::TrainState st;
    st.step = step;
    st.data_position = ds.position();
    st.metadata["config"] = io::gpt_config_to_json(s.cfg);
    st.metadata["data_fingerprint"] = data_fp.to_string();
    st.metadata["data"] = data_record(ds.files(), file_fps);
    st.metadata["seed"] = std::to_string(a.seed);
    dist::save_sharded(a.save, zero, opt, st);
  };

  // ---- training (errors here are failures: exit 1) ----
  optim::CosineSchedule sched{a.lr, a.lr * a.min_lr_ratio, a.warmup, a.steps};
  auto batch_rows = [&](int64_t step, int64_t first, int64_t count) {
    data::Batch b = ds.step_rows(step, first, count);
    return dist::Trainer::Batch{b.inputs.to(dev), b.targets.to(dev)};
  };
  io::Progress progress(a.steps, a.log_every, !lead);
  int64_t nan_streak = 0;  // non-finite steps in a row
  int64_t current_step = first_step;
  install_fault_nan_grad(a.fault_nan_grad, *model, comm, &current_step);
  model->train();
  for (int64_t step = first_step; step < a.steps; ++step) {
    current_step = step;
    auto t0 = std::chrono::steady_clock::now();
    memory_ledger().reset_peaks(dev);
    dist::comm_ledger().reset();
    // The library step ([Note: micro-batch schedule], dist/trainer.h): the same flags with
    // --batch / N fixed give the same bits at any N (docs/exactness.md).
    opt.set_lr(sched.lr(step));
    const dist::StepResult r = trainer.step(step, batch_rows, gpt_loss);
    ds.set_position(step + 1);
    if (r.applied) {
      nan_streak = 0;
    } else {
      std::string what = nonfinite_report(r, step, comm.size());
      if (a.on_nan == "stop")
        throw io::CollectiveStop(what + "; stopping (--on-nan stop; checkpoints already written are intact)");
      if (++nan_streak >= a.nan_skip_limit)
        throw io::CollectiveStop(detail::str(what, "; ", nan_streak, " steps in a row were non-finite (--nan-skip-limit ",
                                                   a.nan_skip_limit, "); stopping"));
      progress.message(what + "; step skipped (--on-nan skip)");
    }
    synchronize(dev);  // the step's time is finished work
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const double tok_s = static_cast<double>(a.batch * a.seq * a.grad_accum) / (ms / 1000.0);
    const double mfu = gpu.peak_bf16_tflops > 0 ? s.cfg.training_flops_per_token(a.seq) * tok_s / (gpu.peak_bf16_tflops * 1e12) : -1;
    progress.step(step, first_step, r.loss, opt.lr(), tok_s, mfu);
    json line = {{"step", step + 1},
                 {"loss", r.loss},
                 {"skipped", !r.applied},
                 {"lr", opt.lr()},
                 {"grad_norm", r.grad_norm},
                 {"tokens_per_s", tok_s},
                 {"ms", ms},
                 {"mem", dist::memory_snapshot(dev)},
                 {"comm", dist::comm_snapshot()}};
    if (mfu >= 0) line["mfu"] = mfu;
    metrics.write(line);
    const bool last = step + 1 == a.steps || step + 1 == a.stop_after;
    if (a.eval_every > 0 && ((step + 1) % a.eval_every == 0 || last) && a.val_fraction > 0) {
      const double val = evaluate(data::Split::Val, a.eval_batches).first;
      progress.message(detail::str("step ", step + 1, ": val_loss ", val));
      metrics.write({{"step", step + 1}, {"val_loss", val}});
    }
    if (!a.save.empty() && (last || (a.save_every > 0 && (step + 1) % a.save_every == 0))) {
      save(step + 1);
      progress.message("saved checkpoint to " + a.save);
    }
    if (step + 1 == a.stop_after) {
      progress.message(detail::str("stopping after step ", step + 1, " (--stop-after)"));
      break;
    }
  }

  if (!a.export_hf.empty()) {  // collective under ZeRO-3: every rank gathers, rank 0 writes
    dist::GatheredParameters gathered(zero);
    if (lead) {
      io::export_hf_dir(*model, a.export_hf, {{"step", std::to_string(ds.position())}});
      progress.message("exported the model to " + a.export_hf + " (model.safetensors, config.json)");
    }
  }

  if (a.sample > 0) {  // collective under ZeRO-3: every rank runs the model, rank 0 prints
    // With a tokenizer a sample starts a document, as the shards' documents do: <|endoftext|>
    // (not printed), then the prompt (none by default).
    std::vector<int64_t> prompt;
    if (s.tok) {
      if (s.tok->eot_id()) prompt.push_back(*s.tok->eot_id());
      const std::vector<int64_t> text = s.tok->encode(app.count("--prompt") ? a.prompt : "");
      prompt.insert(prompt.end(), text.begin(), text.end());
    } else {
      prompt = data::ByteTokenizer().encode(a.prompt);
    }
    auto ids = nn::generate(*model, prompt,
                            {.max_new_tokens = a.sample, .temperature = a.temperature, .top_k = a.top_k, .seed = a.seed});
    if (s.tok && s.tok->eot_id()) ids.erase(ids.begin());
    if (lead)
      std::printf("---- sample (%lld %s, temperature %.2f, top-k %lld) ----\n%s\n----\n",
                  static_cast<long long>(a.sample), s.tok ? "tokens" : "bytes", a.temperature,
                  static_cast<long long>(a.top_k),
                  s.tok ? sample_text(*s.tok, ids).c_str() : data::ByteTokenizer().decode(ids).c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"train_gpt: train a GPT-2-style model on a text file (byte-level) or llm.c token shards with zerodl"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a repeated flag: last wins
  app.add_option("--data", a.data,
                 "text file to train on, or llm.c GPT-2 token shards: FILE.bin or a quoted pattern "
                 "'DIR/*_train_*.bin' read in name order (default: the embedded generated corpus)");
  app.add_option("--steps", a.steps, "total optimizer steps")->check(CLI::PositiveNumber);
  app.add_option("--batch", a.batch, "sequences per step (global batch B)")->check(CLI::PositiveNumber);
  app.add_option("--seq", a.seq, "sequence length T (also the context length of a new model)")->check(CLI::PositiveNumber);
  app.add_option("--n-layer", a.n_layer, "transformer blocks L")->check(CLI::PositiveNumber);
  app.add_option("--n-head", a.n_head, "attention heads")->check(CLI::PositiveNumber);
  app.add_option("--n-embd", a.n_embd, "channels C")->check(CLI::PositiveNumber);
  app.add_option("--vocab-multiple", a.vocab_multiple,
                 "pad a new model's vocabulary to a multiple of this (default 1; 128 with llm.c shards, as GPT-2)")
      ->check(CLI::PositiveNumber);
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
  app.add_flag("--eval-only", a.eval_only, "print the loss on the data read in order from its start, then exit");
  app.add_option("--sample", a.sample, "generate N tokens at the end (bytes on text; on llm.c shards with --tokenizer)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--prompt", a.prompt,
                 "text to start sampling from (default: a newline on text; on shards, <|endoftext|> alone, as a "
                 "document starts)");
  app.add_option("--temperature", a.temperature, "sampling temperature")->check(CLI::PositiveNumber);
  app.add_option("--top-k", a.top_k, "sample among the k most likely tokens (0: all)")->check(CLI::NonNegativeNumber);
  app.add_option("--metrics", a.metrics, "append a JSON line per step (and config, eval lines) to this file");
  app.add_flag("--metrics-all-ranks", a.metrics_all_ranks,
               "every rank writes its own metrics file (FILE with .rank<r> before the extension)");
  app.add_option("--zero-stage", a.zero_stage, "0 = DDP, 1 = shard optimizer states, 2 = + gradients, 3 = + parameters")
      ->check(CLI::Range(0, 3));
  app.add_option("--dtype", a.dtype, "compute and communication dtype: f32 or bf16 (masters and Adam stay f32)");
  app.add_option("--prefetch", a.prefetch, "ZeRO-3: units all-gathered ahead of use")->check(CLI::Range(0, 64));
  app.add_option("--reduction", a.reduction,
                 "gradient sums: exact (a fixed tree: the same bits at any world size with the same --batch/N) or "
                 "native (the MPI library's own order)")
      ->check(CLI::IsMember({"exact", "native"}));
  app.add_option("--max-memory-per-rank", a.max_memory_per_rank,
                 "memory cap in bytes per rank; going over it is a clear out-of-memory error (0: none)")
      ->check(CLI::NonNegativeNumber);
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
  app.add_option("--device", a.device,
                 "cpu, or cuda: each rank trains on GPU (local rank % GPU count); needs a CUDA build")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--dist-backend", a.dist_backend,
                 "collectives: auto (cuda: NCCL when every rank has its own GPU, else MPI staged through host "
                 "memory), mpi, nccl (cuda only)")
      ->check(CLI::IsMember({"auto", "mpi", "nccl"}));
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
  auto init_options = [&]() -> dist::InitOptions {
    if (a.device == "cpu") {
      if (a.dist_backend == "nccl") throw UsageError("--dist-backend nccl needs --device cuda");
      return {.device = Device::cpu(), .backend = a.dist_backend};
    }
#ifndef ZDL_WITH_CUDA
    throw UsageError("--device cuda: this zerodl build has no CUDA support (configure with -DZDL_CUDA=ON and a "
                     "CUDA toolkit)");
#endif
    if (!cuda_available())
      throw UsageError("--device cuda: no CUDA device is visible on this machine (driver loaded? "
                       "CUDA_VISIBLE_DEVICES?)");
    // dist::init makes GPU (local rank % device count) current before anything touches a GPU.
    return {.device = Device::cuda(), .backend = a.dist_backend};
  };
  return io::run_program(
      "train_gpt", app, argc, argv,
      [&](dist::Communicator& comm) {
        if (a.collective_timeout > 0)
          comm.set_timeout(std::chrono::milliseconds(static_cast<int64_t>(a.collective_timeout * 1000)));
        return run(a, app, comm);
      },
      init_options, /*path_flags=*/{"--data", "--save", "--resume", "--init-from", "--metrics", "--tokenizer", "--export-hf"});
}

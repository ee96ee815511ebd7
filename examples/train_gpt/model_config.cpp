#include "examples/train_gpt/model_config.h"

#include <filesystem>
#include <string>

#include "data/byte_tokenizer.h"
#include "data/llmc_shard.h"
#include "dist/checkpoint/sharded_checkpoint.h"
#include "examples/train_gpt/run_settings.h"
#include "io/gpt2_format.h"
#include "io/hf_dir.h"
#include "io/program_main.h"

namespace zdl::train_gpt {

using io::UsageError;

namespace {

// The model's padded vocabulary comes with it (a checkpoint's, a file's): --vocab-multiple must
// give the same, or it would be silently ignored.
void check_vocab_multiple(const Args& a, const CLI::App& app, const nn::GPTConfig& cfg, const std::string& whose) {
  if (given(app, "--vocab-multiple") &&
      (a.vocab_multiple > 1 ? data::padded_vocab(cfg.vocab_size, a.vocab_multiple) : cfg.vocab_size) != cfg.padded_vocab())
    throw UsageError(detail::str("--vocab-multiple ", a.vocab_multiple, " does not give the padded vocabulary ",
                                 cfg.padded_vocab(), " of ", whose, " (the model keeps it; drop the flag)"));
}

// The checkpoint's model (its train state read by read_checkpoint_state); its seed becomes the
// run's.
nn::GPTConfig config_of_checkpoint(Args& a, const CLI::App& app, const std::optional<io::TrainState>& resumed) {
  ZDL_CHECK(resumed.has_value(), "config_of_checkpoint: the checkpoint's train state was not read");
  nn::GPTConfig cfg;
  uint64_t saved_seed = 0;
  try {
    cfg = io::gpt_config_from_json(resumed->metadata.at("config"), "the checkpoint's model config");
    // The run's seed fixes init, data order and dropout: a resumed run keeps its own.
    saved_seed = std::stoull(resumed->metadata.at("seed"));
  } catch (const std::exception& e) {
    throw UsageError(std::string("--resume: ") + e.what());
  }
  if (given(app, "--seed") && a.seed != saved_seed)
    throw UsageError(detail::str("--seed ", a.seed, " differs from the checkpoint's seed ", saved_seed,
                                 " (a resumed run keeps its seed: data order and dropout depend on it; drop the flag)"));
  a.seed = saved_seed;
  if (!a.init_from.empty()) throw UsageError("--init-from and --resume exclude each other (the checkpoint holds the weights)");
  // The model comes from the checkpoint: a shape flag that disagrees would be silently ignored.
  auto check_flag = [&](const char* flag, auto flag_value, auto saved_value) {
    if (given(app, flag) && flag_value != saved_value)
      throw UsageError(detail::str(flag, " ", flag_value, " differs from ", saved_value, " in the checkpoint '",
                                   a.resume, "' (a resumed run keeps its model; drop the flag)"));
  };
  check_flag("--n-layer", a.n_layer, cfg.n_layer);
  check_flag("--n-head", a.n_head, cfg.n_head);
  check_flag("--n-embd", a.n_embd, cfg.n_embd);
  check_flag("--dropout", a.dropout, cfg.dropout);
  check_flag("--vocab-size", a.vocab_size, cfg.vocab_size);
  check_vocab_multiple(a, app, cfg, "the checkpoint '" + a.resume + "'");
  return cfg;
}

// A GPT-2 safetensors file, or a Hugging Face-style directory holding one with its config.json
// (a.init_from then names the weights file).
nn::GPTConfig config_of_gpt2_file(Args& a, const CLI::App& app) {
  if (!std::filesystem::exists(a.init_from)) throw UsageError("--init-from: no file '" + a.init_from + "'");
  const bool dir = std::filesystem::is_directory(a.init_from);
  if (dir && !std::filesystem::exists(std::filesystem::path(a.init_from) / io::kHfWeightsFile))
    throw UsageError("--init-from: '" + a.init_from + "' is a directory without " + io::kHfWeightsFile +
                     "; it takes a GPT-2 safetensors file or such a directory (continue a sharded checkpoint "
                     "with --resume, or consolidate it with consolidate_checkpoint)");
  io::GPT2ConfigOverrides ov;
  ov.dropout = a.dropout;
  const std::string source = dir ? (std::filesystem::path(a.init_from) / io::kHfConfigFile).string() : a.init_from;
  nn::GPTConfig cfg;
  try {
    if (dir) {
      cfg = io::config_from_hf_dir(a.init_from, ov);  // n_head from config.json, every field checked
      a.init_from = (std::filesystem::path(a.init_from) / io::kHfWeightsFile).string();
    } else {
      if (given(app, "--n-head")) ov.n_head = a.n_head;
      ov.n_head_source = "--n-head";
      cfg = io::config_from_gpt2_file(a.init_from, ov);
    }
  } catch (const std::exception& e) {  // not a GPT-2 file: a checkpoint directory, another model's file
    throw UsageError(std::string("--init-from: ") + e.what());
  }
  auto check_flag = [&](const char* flag, int64_t flag_value, int64_t file_value) {
    if (given(app, flag) && flag_value != file_value)
      throw UsageError(detail::str(flag, " ", flag_value, " differs from ", file_value, " in ", source));
  };
  check_flag("--n-head", a.n_head, cfg.n_head);
  check_flag("--n-layer", a.n_layer, cfg.n_layer);
  check_flag("--n-embd", a.n_embd, cfg.n_embd);
  check_flag("--vocab-size", a.vocab_size, cfg.vocab_size);
  check_vocab_multiple(a, app, cfg, source);  // it was ignored here
  return cfg;
}

// A new model of the flags' shape, on the data's vocabulary.
nn::GPTConfig config_of_flags(const Args& a, const CLI::App& app, data::TokenFormat format, int64_t tokenizer_vocab) {
  const bool gpt2 = format == data::TokenFormat::Llmc;
  nn::GPTConfig cfg;
  cfg.vocab_size = a.vocab_size > 0       ? a.vocab_size
                   : tokenizer_vocab > 0 ? tokenizer_vocab
                   : gpt2                ? data::kGpt2VocabSize
                                         : data::ByteTokenizer::kVocabSize;
  const int64_t multiple = given(app, "--vocab-multiple") ? a.vocab_multiple : gpt2 ? data::kGpt2VocabMultiple : 1;
  cfg.padded_vocab_size = multiple > 1 ? data::padded_vocab(cfg.vocab_size, multiple) : 0;
  cfg.block_size = a.seq;
  cfg.n_layer = a.n_layer;
  cfg.n_head = a.n_head;
  cfg.n_embd = a.n_embd;
  cfg.dropout = a.dropout;
  return cfg;
}

}  // namespace

std::vector<std::string> read_checkpoint_state(Args& a, const CLI::App& app, std::optional<io::TrainState>& resumed) {
  if (a.resume.empty()) throw UsageError("--resume is empty: give a checkpoint directory");
  if (!std::filesystem::exists(a.resume)) throw UsageError("--resume: no checkpoint at '" + a.resume + "'");
  try {
    resumed = dist::read_sharded_train_state(a.resume);
  } catch (const std::exception& e) {
    throw UsageError(std::string("--resume: ") + e.what());
  }
  const auto it = resumed->metadata.find("run");
  return it == resumed->metadata.end() ? std::vector<std::string>{} : adopt_run_settings(a, app, it->second);
}

nn::GPTConfig model_config(Args& a, const CLI::App& app, std::optional<io::TrainState>& resumed,
                           data::TokenFormat format, int64_t tokenizer_vocab) {
  if (!a.resume.empty()) return config_of_checkpoint(a, app, resumed);
  if (!a.init_from.empty()) return config_of_gpt2_file(a, app);
  return config_of_flags(a, app, format, tokenizer_vocab);
}

}  // namespace zdl::train_gpt

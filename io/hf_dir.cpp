#include "io/hf_dir.h"

#include <filesystem>
#include <optional>

#include "io/checkpoint_dir.h"
#include "io/dir_lock.h"
#include "io/file.h"
#include "io/json_fields.h"

namespace zdl::io {

namespace fs = std::filesystem;

std::string hf_gpt2_config_json(const nn::GPTConfig& c) {
  const int64_t last_id = c.vocab_size - 1;
  return nlohmann::ordered_json{{"architectures", {"GPT2LMHeadModel"}},
                                {"model_type", "gpt2"},
                                {"vocab_size", c.vocab_size},
                                {"n_positions", c.block_size},
                                {"n_ctx", c.block_size},
                                {"n_embd", c.n_embd},
                                {"n_layer", c.n_layer},
                                {"n_head", c.n_head},
                                {"n_inner", nullptr},
                                {"activation_function", "gelu_new"},
                                {"resid_pdrop", c.dropout},  // zerodl's one rate for all three
                                {"embd_pdrop", c.dropout},
                                {"attn_pdrop", c.dropout},
                                {"layer_norm_epsilon", nn::kGptLayerNormEps},
                                {"initializer_range", 0.02},
                                {"bos_token_id", last_id},
                                {"eos_token_id", last_id},
                                {"tie_word_embeddings", true}}
             .dump(2) +
         "\n";
}

// ---- reading ----

namespace {

nlohmann::json read_config_json(const fs::path& file, const std::string& dir) {
  constexpr uint64_t kMaxBytes = 1 << 20;  // transformers' configs are a few KB
  require(fs::is_regular_file(file), "'", dir, "' holds ", kHfWeightsFile, " but no ", kHfConfigFile,
            " (or it is not a file): without it the architecture (n_head, activation, epsilon) is unknown; "
            "read the weights file itself and state n_head");
  InputFile in(file.string());
  require(in.size() <= kMaxBytes, "'", file.string(), "' is ", in.size(), " bytes: not a model config (at most ",
            kMaxBytes, ")");
  std::string text(in.size(), '\0');
  in.read_exact(0, text.data(), text.size(), "the config");
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  require(!j.is_discarded() && j.is_object(), "'", file.string(), "' is not a JSON object");
  return j;
}

// One field of config.json against what the weights or zerodl's GPT say.
class ConfigFields {
 public:
  ConfigFields(const nlohmann::json& j, std::string file) : j_(j), file_(std::move(file)) {}

  int64_t required_int(const char* key) const {
    require(j_.contains(key), "'", file_, "' lacks \"", key, "\"");
    return json_integer<int64_t>(j_.at(key), "'" + file_ + "': " + key);
  }
  void int_equals(const char* key, int64_t want, const std::string& why) const {
    const int64_t v = required_int(key);
    require(v == want, "'", file_, "': ", key, "=", v, " but ", why);
  }
  // Where present: one of the allowed values.
  void string_in(const char* key, std::initializer_list<const char*> allowed, const std::string& why) const {
    if (!j_.contains(key)) return;
    const nlohmann::json& v = j_.at(key);
    for (const char* a : allowed)
      if (v.is_string() && v.get<std::string>() == a) return;
    require(false, "'", file_, "': ", key, "=", json_shown(v), " but ", why);
  }
  void bool_is(const char* key, bool want, const std::string& why) const {
    if (!j_.contains(key)) return;
    const nlohmann::json& v = j_.at(key);
    require(v.is_boolean() && v.get<bool>() == want, "'", file_, "': ", key, "=", json_shown(v), " but ", why);
  }
  void number_is(const char* key, double want, const std::string& why) const {
    if (!j_.contains(key)) return;
    const nlohmann::json& v = j_.at(key);
    // The value as written ("1e-05") parses to the double nearest it: a decimal of 1e-5 is that same double.
    require(v.is_number() && v.get<double>() == want, "'", file_, "': ", key, "=", json_shown(v), " but ", why);
  }
  // Where present: null, or the integer `want`.
  void null_or_int(const char* key, int64_t want, const std::string& why) const {
    if (!j_.contains(key) || j_.at(key).is_null()) return;
    const int64_t v = json_integer<int64_t>(j_.at(key), "'" + file_ + "': " + key);
    require(v == want, "'", file_, "': ", key, "=", v, " but ", why);
  }
  void int_is_if_present(const char* key, int64_t want, const std::string& why) const {
    if (j_.contains(key)) int_equals(key, want, why);
  }
  // Where present: a list naming at least one of the allowed values.
  void list_names_one_of(const char* key, std::initializer_list<const char*> allowed, const std::string& why) const {
    if (!j_.contains(key)) return;
    const nlohmann::json& v = j_.at(key);
    if (v.is_array())
      for (const nlohmann::json& e : v)
        for (const char* a : allowed)
          if (e.is_string() && e.get<std::string>() == a) return;
    require(false, "'", file_, "': ", key, "=", json_shown(v), " but ", why);
  }

 private:
  const nlohmann::json& j_;
  std::string file_;
};

}  // namespace

nn::GPTConfig config_from_hf_dir(const std::string& dir, const GPT2ConfigOverrides& overrides) {
  require(overrides.n_head == 0, "config_from_hf_dir('", dir, "'): n_head comes from its config.json, not the overrides");
  const fs::path weights = fs::path(dir) / kHfWeightsFile, config_file = fs::path(dir) / kHfConfigFile;
  require(fs::exists(weights), "'", dir, "' is a directory without ", kHfWeightsFile);
  require(fs::is_regular_file(weights), "'", weights.string(), "' is not a regular file");
  const nlohmann::json j = read_config_json(config_file, dir);
  const ConfigFields f(j, config_file.string());

  // n_head first: the weights' header is read with it (and checked against its metadata there).
  GPT2ConfigOverrides ov = overrides;
  ov.n_head = f.required_int("n_head");
  require(ov.n_head > 0, "'", config_file.string(), "': n_head=", ov.n_head, " is not a positive integer");
  ov.n_head_source = config_file.string();
  nn::GPTConfig cfg = config_from_gpt2_file(weights.string(), ov);

  const std::string w = kHfWeightsFile;
  f.int_equals("n_layer", cfg.n_layer, w + " holds " + std::to_string(cfg.n_layer) + " blocks");
  f.int_equals("n_embd", cfg.n_embd, w + "'s wte.weight is " + std::to_string(cfg.n_embd) + " wide");
  f.int_equals("n_positions", cfg.block_size, w + "'s wpe.weight has " + std::to_string(cfg.block_size) + " rows");
  f.int_is_if_present("n_ctx", cfg.block_size, w + "'s wpe.weight has " + std::to_string(cfg.block_size) + " rows");
  f.int_equals("vocab_size", cfg.vocab_size, w + " holds a vocabulary of " + std::to_string(cfg.vocab_size));
  f.null_or_int("n_inner", 4 * cfg.n_embd, "zerodl's MLP is 4 n_embd = " + std::to_string(4 * cfg.n_embd) + " wide");
  f.string_in("model_type", {"gpt2"}, "zerodl reads GPT-2 models (\"gpt2\")");
  f.list_names_one_of("architectures", {"GPT2LMHeadModel", "GPT2Model"},
                      "zerodl reads GPT-2 models (\"GPT2LMHeadModel\")");
  f.string_in("activation_function", {"gelu_new", "gelu_pytorch_tanh"},
              "zerodl's GPT uses GELU's tanh form (\"gelu_new\")");
  f.number_is("layer_norm_epsilon", nn::kGptLayerNormEps, "zerodl's LayerNorm epsilon is 1e-05");
  f.bool_is("tie_word_embeddings", true, "zerodl's GPT ties the output layer to wte (true)");
  f.bool_is("scale_attn_weights", true, "zerodl's attention scales by 1/sqrt(head size) (true)");
  f.bool_is("scale_attn_by_inverse_layer_idx", false, "zerodl's attention has no per-layer scale (false)");
  f.bool_is("add_cross_attention", false, "zerodl's GPT has no cross-attention (false)");
  return cfg;
}

// ---- writing ----

namespace {

// What an export may replace: nothing, an empty directory, an earlier export (with the files
// beside it a user added), or a zerodl checkpoint (an export next to it). Anything else (a
// project folder, a home directory) is refused: a writer swaps the directory whole.
bool replaceable(const fs::path& d) {
  std::error_code ec;
  if (!fs::exists(d, ec) || fs::is_empty(d, ec)) return true;
  for (const char* marker : {kHfConfigFile, kHfWeightsFile, "layout.json"})
    if (fs::exists(d / marker, ec)) return true;
  return false;
}

// The directory `dir` names ("hf/" and "hf" alike; a symbolic link: the directory it points to),
// after the checks every writer needs.
fs::path hf_dir_path(const std::string& dir) {
  fs::path d = fs::path(dir).lexically_normal();
  if (d.filename().empty()) d = d.parent_path();
  require(!d.empty() && !d.filename().empty() && d.filename() != "." && d.filename() != "..", "'", dir,
          "' names no directory an export can replace; give a directory's name");
  require_outside_working_directory(dir);
  d = directory_link_target(d.string());  // the swap must replace the target, not the link
  // The first part of the path that is not a directory, from the top ("afile/sub": 'afile').
  fs::path prefix;
  for (const fs::path& part : d) {
    prefix /= part;
    std::error_code ec;
    const fs::file_status st = fs::status(prefix, ec);
    if (!fs::exists(st)) break;
    require(fs::is_directory(st), "'", prefix.string(), "' is a file, not a directory",
              prefix == d ? "" : " (in '" + dir + "')");
  }
  const fs::path parent = d.has_parent_path() ? d.parent_path() : ".";
  require(fs::is_directory(parent), "the directory '", parent.string(), "' (where '", dir, "' goes) does not exist");
  require(replaceable(d), "'", dir, "' is a non-empty directory that is neither a model export (no ", kHfConfigFile,
          " or ", kHfWeightsFile, ") nor a zerodl checkpoint; an export replaces its directory: choose a new or empty "
          "one, or an export to replace");
  return d;
}

bool owned_by_hf_export(const std::string& name) { return name == kHfWeightsFile || name == kHfConfigFile; }

}  // namespace

std::string check_hf_dir_destination(const std::string& dir, int64_t bytes) {
  const fs::path d = hf_dir_path(dir);
  if (fs::exists(d)) {
    const std::string why = unwritable_reason(d.string());
    require(why.empty(), "the directory '", dir, "' is not writable (", why, ")");
  }
  // The new pair is staged next to `dir`, on the parent's file system.
  check_can_write_in(d.has_parent_path() ? d.parent_path().string() : ".", dir, bytes);
  return d.string();
}

void write_hf_dir(const std::string& dir, const nn::GPTConfig& cfg,
                  const std::function<void(const std::string& weights_path)>& write_weights) {
  const fs::path d = hf_dir_path(dir);
  std::optional<DirLock> lock;
  if (!DirLock::held_here(d.string())) lock.emplace(d.string());
  with_fs_errors(dir, "write_hf_dir", [&] {
    prepare_staging(d.string());
    const fs::path staging = checkpoint_sibling(d.string(), ".saving");
    try {
      write_weights((staging / kHfWeightsFile).string());
      const std::string text = hf_gpt2_config_json(cfg);
      AtomicFileWriter w((staging / kHfConfigFile).string());
      w.write(text.data(), text.size());
      w.commit();
      swap_into_place(d.string(), owned_by_hf_export);
    } catch (...) {
      std::error_code ec;
      fs::remove_all(staging, ec);
      throw;
    }
  });
}

void export_hf_dir(const nn::GPT& model, const std::string& dir, const Metadata& extra_metadata) {
  write_hf_dir(dir, model.config, [&](const std::string& path) { export_gpt2(model, path, extra_metadata); });
}

}  // namespace zdl::io

#include "io/gpt2_format.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "io/file.h"
#include "io/json_fields.h"

namespace zdl::io {

namespace {

// The file's tensors for L layers, width C, V vocabulary rows, T positions, in GPT-2's order.
std::vector<Gpt2Tensor> gpt2_layout(int64_t L, int64_t C, int64_t V, int64_t T) {
  std::vector<Gpt2Tensor> out = {{"wte.weight", {V, C}}, {"wpe.weight", {T, C}}};
  for (int64_t i = 0; i < L; ++i) {
    const std::string p = "h." + std::to_string(i) + ".";
    out.push_back({p + "ln_1.weight", {C}});
    out.push_back({p + "ln_1.bias", {C}, false, true});
    out.push_back({p + "attn.c_attn.weight", {C, 3 * C}, true});
    out.push_back({p + "attn.c_attn.bias", {3 * C}, false, true});
    out.push_back({p + "attn.c_proj.weight", {C, C}, true});
    out.push_back({p + "attn.c_proj.bias", {C}, false, true});
    out.push_back({p + "ln_2.weight", {C}});
    out.push_back({p + "ln_2.bias", {C}, false, true});
    out.push_back({p + "mlp.c_fc.weight", {C, 4 * C}, true});
    out.push_back({p + "mlp.c_fc.bias", {4 * C}, false, true});
    out.push_back({p + "mlp.c_proj.weight", {4 * C, C}, true});
    out.push_back({p + "mlp.c_proj.bias", {C}, false, true});
  }
  out.push_back({"ln_f.weight", {C}});
  out.push_back({"ln_f.bias", {C}, false, true});
  return out;
}

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

// Block index of "h.<i>.<rest>", or -1.
int64_t block_index(const std::string& name, std::string* rest = nullptr) {
  if (!starts_with(name, "h.")) return -1;
  size_t i = 2, j = i;
  while (j < name.size() && std::isdigit(static_cast<unsigned char>(name[j]))) ++j;
  if (j == i || j - i > 9 || j >= name.size() || name[j] != '.') return -1;
  if (rest) *rest = name.substr(j + 1);
  return std::stoll(name.substr(i, j - i));
}

// File name -> the name GPT-2 loaders use, or "" for entries that are ignored on import
// (tied lm_head, HF's causal-mask buffers).
std::string canonical_name(const std::string& file_name) {
  std::string n = starts_with(file_name, "transformer.") ? file_name.substr(12) : file_name;
  if (n == "lm_head.weight") return "";
  std::string rest;
  if (block_index(n, &rest) >= 0 && (rest == "attn.bias" || rest == "attn.masked_bias")) return "";
  return n;
}

int64_t metadata_int(const std::string& path, const Metadata& m, const std::string& key) {
  auto it = m.find(key);
  if (it == m.end()) return 0;
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(it->second, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  ZDL_CHECK(used == it->second.size() && !it->second.empty() && v > 0, "GPT-2 file '", path, "': metadata ", key,
            "='", it->second, "' is not a positive integer");
  return v;
}

}  // namespace

std::vector<Gpt2Tensor> gpt2_layout(const nn::GPTConfig& cfg) {
  return gpt2_layout(cfg.n_layer, cfg.n_embd, cfg.vocab_size, cfg.block_size);
}

Metadata gpt2_metadata(const nn::GPTConfig& cfg) {
  return {{"format", "pt"},  // what transformers' safetensors loader requires of a PyTorch-layout file
          {"n_layer", std::to_string(cfg.n_layer)},
          {"n_head", std::to_string(cfg.n_head)},
          {"n_embd", std::to_string(cfg.n_embd)},
          {"vocab_size", std::to_string(cfg.vocab_size)},
          {"padded_vocab_size", std::to_string(cfg.padded_vocab())},
          {"block_size", std::to_string(cfg.block_size)}};
}

int64_t gpt2_file_bytes(const nn::GPTConfig& cfg, DType dtype) {
  int64_t elements = 0;
  for (const auto& e : gpt2_layout(cfg)) elements += numel_of(e.file_shape);
  constexpr int64_t kHeaderBound = int64_t{1} << 20;  // names, shapes, offsets and metadata: far below
  return elements * static_cast<int64_t>(element_size(dtype)) + kHeaderBound;
}

void export_gpt2(const nn::GPT& model, const std::string& path, const Metadata& extra_metadata) {
  const nn::GPTConfig& cfg = model.config;
  std::map<std::string, Tensor> params;
  for (auto& [n, t] : model.named_parameters()) params[n] = t;
  NoGradGuard ng;
  NamedTensors out;
  for (const auto& e : gpt2_layout(cfg)) {
    auto it = params.find(e.name);
    if (it == params.end()) {
      ZDL_CHECK(e.bias && !cfg.bias, "export_gpt2('", path, "'): the model has no parameter '", e.name, "'");
      // bias=false: GPT-2 loaders expect a bias; zero is the same function.
      Tensor w = params.at(e.name.substr(0, e.name.size() - 4) + "weight");
      out.emplace_back(e.name, Tensor::zeros(e.file_shape, w.dtype()));
      continue;
    }
    Tensor t = it->second.detach();
    if (e.name == "wte.weight" && t.size(0) != cfg.vocab_size) t = slice(t, 0, 0, cfg.vocab_size);  // drop padding
    if (e.conv1d) t = transpose(t, 0, 1);  // (out, in) -> Conv1D (in, out); the writer makes it contiguous
    ZDL_CHECK(t.shape() == e.file_shape, "export_gpt2: '", e.name, "' has shape=", shape_str(t.shape()),
              ", GPT-2 layout wants ", shape_str(e.file_shape));
    out.emplace_back(e.name, t);
  }
  Metadata meta = extra_metadata;
  for (auto& [k, v] : gpt2_metadata(cfg)) meta[k] = v;
  save_safetensors(path, out, meta);
}

nn::GPTConfig config_from_gpt2_file(const std::string& path, const GPT2ConfigOverrides& overrides) {
  SafetensorsHeader h = read_safetensors_header(path);
  std::map<std::string, const SafetensorsEntry*> by_name;
  for (const auto& e : h.entries) {
    std::string n = canonical_name(e.name);
    if (!n.empty()) by_name[n] = &e;
  }
  auto need_2d = [&](const std::string& n) {
    auto it = by_name.find(n);
    ZDL_CHECK(it != by_name.end(), "GPT-2 file '", path, "' has no '", n, "' (not a GPT-2 checkpoint?)");
    ZDL_CHECK(it->second->shape.size() == 2, "GPT-2 file '", path, "': '", n, "' must be 2-D, got shape=",
              shape_str(it->second->shape));
    return it->second->shape;
  };
  Shape wte = need_2d("wte.weight"), wpe = need_2d("wpe.weight");
  ZDL_CHECK(wte[1] == wpe[1], "GPT-2 file '", path, "': wte width ", wte[1], " != wpe width ", wpe[1]);

  std::set<int64_t> blocks;
  for (auto& [n, e] : by_name)
    if (int64_t i = block_index(n); i >= 0) blocks.insert(i);
  ZDL_CHECK(!blocks.empty(), "GPT-2 file '", path, "' has no h.{i} blocks");
  const int64_t L = static_cast<int64_t>(blocks.size());
  ZDL_CHECK(*blocks.rbegin() == L - 1, "GPT-2 file '", path, "': blocks are not numbered 0..", L - 1,
            " (highest is h.", *blocks.rbegin(), ")");

  for (auto& [n, e] : by_name)
    ZDL_CHECK(is_floating(e->dtype), "GPT-2 file '", path, "': '", n, "' is ", safetensors_dtype_name(e->dtype),
              " (weights must be floating point: F32, BF16, F16 or F64)");

  nn::GPTConfig cfg;
  cfg.n_layer = L;
  cfg.n_embd = wte[1];
  cfg.block_size = wpe[0];
  cfg.vocab_size = wte[0];
  // Metadata that contradicts the tensors' shapes is a damaged or hand-edited file, not a
  // choice between the two.
  for (auto [key, shape_value] : {std::pair<const char*, int64_t>{"n_layer", L}, {"n_embd", wte[1]}, {"block_size", wpe[0]}})
    if (int64_t v = metadata_int(path, h.metadata, key); v > 0)
      ZDL_CHECK(v == shape_value, "GPT-2 file '", path, "': metadata ", key, "=", v, " contradicts the tensors (",
                shape_value, ")");
  // A file that stores padded rows (llm.c style) says the real vocabulary in its metadata.
  if (int64_t v = metadata_int(path, h.metadata, "vocab_size"); v > 0) {
    ZDL_CHECK(v <= wte[0], "GPT-2 file '", path, "': metadata vocab_size=", v, " exceeds wte's ", wte[0], " rows");
    if (v < wte[0]) {
      cfg.vocab_size = v;
      cfg.padded_vocab_size = wte[0];
    }
  }
  if (overrides.padded_vocab_size > 0) cfg.padded_vocab_size = overrides.padded_vocab_size;
  else if (int64_t p = metadata_int(path, h.metadata, "padded_vocab_size"); p > cfg.vocab_size) cfg.padded_vocab_size = p;

  const int64_t meta_heads = metadata_int(path, h.metadata, "n_head");
  require(meta_heads > 0 || overrides.n_head > 0, "GPT-2 file '", path,
            "' does not record n_head (Hugging Face files keep it in config.json next to them): give it with ",
            overrides.n_head_source.empty() ? "the overrides, e.g. {.n_head = 12} for GPT-2 small"
                                            : overrides.n_head_source + " (12 for GPT-2 small)");
  require(meta_heads == 0 || overrides.n_head == 0 || meta_heads == overrides.n_head, "GPT-2 file '", path,
            "' was written with n_head=", meta_heads, " but ",
            overrides.n_head_source.empty() ? "the overrides say" : overrides.n_head_source + " says",
            " n_head=", overrides.n_head);
  cfg.n_head = overrides.n_head > 0 ? overrides.n_head : meta_heads;
  cfg.bias = by_name.count("ln_f.bias") > 0;
  cfg.dropout = overrides.dropout;
  cfg.validate();
  return cfg;
}

void load_gpt2(nn::GPT& model, const std::string& path) {
  const nn::GPTConfig& cfg = model.config;
  SafetensorsFile f = load_safetensors(path);
  std::map<std::string, Tensor> file;
  std::string problems;
  auto problem = [&](const std::string& p) { problems += (problems.empty() ? "" : "; ") + p; };
  Tensor lm_head;  // GPT-2 ties it to wte: a file's own copy is checked, not loaded
  for (auto& [n, t] : f.tensors) {
    std::string c = canonical_name(n);
    if (c.empty()) {
      if (n == "lm_head.weight" || n == "transformer.lm_head.weight") lm_head = t;
      continue;
    }
    if (!file.emplace(c, t).second) problem("duplicate: " + c + " (with and without 'transformer.')");
  }
  std::map<std::string, Tensor> params;
  for (auto& [n, t] : model.named_parameters()) params[n] = t;

  const int64_t V = cfg.vocab_size, Vp = cfg.padded_vocab(), C = cfg.n_embd;
  // An untied head (a fine-tune that trained lm_head apart from wte) was dropped silently: the
  // model would have scored with another output layer than the file's.
  if (lm_head.defined() && file.count("wte.weight") && lm_head.dim() == 2 && lm_head.size(1) == C &&
      lm_head.size(0) >= V && file.at("wte.weight").size(0) >= V) {
    const Tensor head = slice(lm_head, 0, 0, V).to(DType::F32).contiguous_copy();
    const Tensor wte = slice(file.at("wte.weight"), 0, 0, V).to(DType::F32).contiguous_copy();
    if (std::memcmp(head.raw_data(), wte.raw_data(), head.nbytes()) != 0)
      problem("lm_head.weight differs from wte.weight (an untied LM head; zerodl's GPT ties it to wte, as GPT-2 "
              "does, and would drop it)");
  }
  // The model's biases follow ln_f.bias (load_gpt2_config): a file with biases but without that
  // one made every other bias "non-zero but the model has bias=false", ln_f.bias never named.
  const bool lnf_bias_missing =
      !cfg.bias && !file.count("ln_f.bias") &&
      std::any_of(file.begin(), file.end(), [](const auto& kv) { return kv.first.ends_with(".bias"); });
  if (lnf_bias_missing)
    problem("missing: ln_f.bias (the file's other biases say the model has them; without it the model is read as "
            "one with bias=false)");
  auto layout = gpt2_layout(cfg);
  std::vector<std::pair<const Gpt2Tensor*, Tensor>> to_copy;
  for (const auto& e : layout) {
    auto it = file.find(e.name);
    if (it == file.end()) {
      if (!(e.bias && !params.count(e.name))) problem("missing: " + e.name);  // bias=false files may omit biases
      continue;
    }
    Tensor src = it->second;
    file.erase(it);
    if (!is_floating(src.dtype())) {
      problem(e.name + " is " + dtype_name(src.dtype()) + " (weights must be floating point)");
      continue;
    }
    bool shape_ok = src.shape() == e.file_shape || (e.name == "wte.weight" && src.shape() == Shape{Vp, C});
    if (!shape_ok) {
      problem(e.name + " (expected " + shape_str(e.file_shape) +
              (e.name == "wte.weight" && Vp != V ? " or " + shape_str({Vp, C}) : "") + ", got " +
              shape_str(src.shape()) + ")");
      continue;
    }
    if (!params.count(e.name)) {
      ZDL_CHECK(e.bias, "load_gpt2: the model has no parameter '", e.name, "'");
      bool zero = true;
      for (double v : src.to_vector()) zero = zero && v == 0.0;
      if (!zero && !lnf_bias_missing) problem(e.name + " is non-zero but the model has bias=false");
      continue;
    }
    to_copy.emplace_back(&e, src);
  }
  for (auto& [n, t] : file) problem("unexpected: " + n);
  ZDL_CHECK(problems.empty(), "load_gpt2('", path, "'): the file does not match the model (n_layer=", cfg.n_layer,
            ", n_embd=", C, ", vocab_size=", V, ", padded_vocab=", Vp, ", block_size=", cfg.block_size,
            "): ", problems);

  NoGradGuard ng;
  for (auto& [e, src] : to_copy) {
    Tensor dst = params.at(e->name);
    if (e->conv1d) {
      dst.copy_(transpose(src, 0, 1));  // Conv1D (in, out) -> Linear (out, in)
    } else if (e->name == "wte.weight" && src.size(0) != dst.size(0)) {
      // V rows into a (Vp, C) table: padding rows are zero (no real token reaches them).
      Tensor full = Tensor::zeros(dst.shape(), src.dtype());
      Tensor::from_storage(full.storage(), src.shape(), contiguous_strides(src.shape()), 0, src.dtype()).copy_(src);
      dst.copy_(full);
    } else {
      dst.copy_(src);
    }
  }
}

std::string gpt_config_to_json(const nn::GPTConfig& c) {
  return nlohmann::ordered_json{{"vocab_size", c.vocab_size}, {"padded_vocab_size", c.padded_vocab_size},
                                {"block_size", c.block_size}, {"n_layer", c.n_layer},
                                {"n_head", c.n_head},         {"n_embd", c.n_embd},
                                {"dropout", c.dropout},       {"bias", c.bias}}
      .dump();
}

nn::GPTConfig gpt_config_from_json(const std::string& text, const std::string& what) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  ZDL_CHECK(!j.is_discarded() && j.is_object(), what, ": the GPT config is not a JSON object: ", text.substr(0, 200));
  nn::GPTConfig c;
  auto integer = [&](const char* key) {
    ZDL_CHECK(j.contains(key), what, ": the GPT config lacks \"", key, "\"");
    return json_integer<int64_t>(j.at(key), what + ": " + key);
  };
  c.vocab_size = integer("vocab_size");
  c.padded_vocab_size = j.contains("padded_vocab_size") ? integer("padded_vocab_size") : 0;
  c.block_size = integer("block_size");
  c.n_layer = integer("n_layer");
  c.n_head = integer("n_head");
  c.n_embd = integer("n_embd");
  if (j.contains("dropout")) {
    ZDL_CHECK(j["dropout"].is_number(), what, ": dropout must be a number, got ", json_shown(j["dropout"]));
    c.dropout = j["dropout"].get<double>();
  }
  if (j.contains("bias")) {
    ZDL_CHECK(j["bias"].is_boolean(), what, ": bias must be true or false, got ", json_shown(j["bias"]));
    c.bias = j["bias"].get<bool>();
  }
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(what + ": " + e.what());
  }
  return c;
}

}  // namespace zdl::io

// ---- consolidation ----

namespace zdl::io {
namespace {

// The GPT config saved with the model, checked against the saved parameters.
nn::GPTConfig consolidated_config(const SavedGpt& saved, const std::string& what) {
  ZDL_CHECK(!saved.config_json.empty(), what,
            ": the checkpoint has no GPT config in its metadata[\"config\"] (save it in the TrainState's metadata, "
            "as train_gpt does) so n_head and the vocabulary size are known");
  nn::GPTConfig cfg = gpt_config_from_json(saved.config_json, what + ": metadata[\"config\"]");
  cfg.bias = std::any_of(saved.params.begin(), saved.params.end(), [](const auto& p) { return p.first == "ln_f.bias"; });
  cfg.validate();
  // Bounds before gpt2_layout(cfg) builds n_layer * 12 entries and multiplies n_embd by 4: a
  // hostile config must not allocate without bound or overflow (every real model is far below).
  constexpr int64_t kMaxDim = int64_t{1} << 40;
  ZDL_CHECK(cfg.n_layer <= static_cast<int64_t>(saved.params.size()) && cfg.n_embd <= kMaxDim &&
                cfg.padded_vocab() <= kMaxDim && cfg.block_size <= kMaxDim,
            what, ": metadata[\"config\"] (n_layer=", cfg.n_layer, ", n_embd=", cfg.n_embd,
            ", padded_vocab=", cfg.padded_vocab(), ", block_size=", cfg.block_size, ") does not fit the ",
            saved.params.size(), " saved parameters");
  return cfg;
}

// The parameter's shape in zdl for a GPT-2 file tensor (Linear is the transpose of Conv1D;
// wte keeps its padding rows).
Shape zdl_shape(const Gpt2Tensor& t, const nn::GPTConfig& cfg) {
  if (t.conv1d) return {t.file_shape[1], t.file_shape[0]};
  if (t.name == "wte.weight") return {cfg.padded_vocab(), cfg.n_embd};
  return t.file_shape;
}

}  // namespace

void write_gpt2_consolidated(const SavedGpt& saved, const std::string& out_path, const std::string& what) {
  const nn::GPTConfig cfg = consolidated_config(saved, what);
  std::map<std::string, Shape> by_name(saved.params.begin(), saved.params.end());

  // The saved parameters must be exactly a GPT of that config.
  const std::vector<Gpt2Tensor> gpt2 = gpt2_layout(cfg);
  std::map<std::string, const Gpt2Tensor*> wanted;
  std::string problems;
  auto problem = [&](const std::string& p) { problems += (problems.empty() ? "" : "; ") + p; };
  for (auto& t : gpt2) {
    wanted[t.name] = &t;
    auto it = by_name.find(t.name);
    if (it == by_name.end()) {
      if (!(t.bias && !cfg.bias)) problem("missing: " + t.name);
      continue;
    }
    if (it->second != zdl_shape(t, cfg))
      problem(t.name + " (config wants " + shape_str(zdl_shape(t, cfg)) + ", checkpoint has " +
              shape_str(it->second) + ")");
  }
  for (auto& [name, shape] : saved.params)
    if (!wanted.count(name)) problem("unexpected: " + name);
  ZDL_CHECK(problems.empty(), what, ": the checkpoint is not the GPT its config describes (", "n_layer=", cfg.n_layer,
            ", n_embd=", cfg.n_embd, ", vocab_size=", cfg.vocab_size, ", padded_vocab=", cfg.padded_vocab(),
            ", block_size=", cfg.block_size, "): ", problems);

  // Data order: the saved parameters in their order (for a ZeRO checkpoint, the order they were
  // trained in), then the zero biases of a bias=false model. All f32, so every tensor is aligned.
  std::vector<SafetensorsTensorSpec> specs;
  std::vector<const Gpt2Tensor*> order;
  for (auto& [name, shape] : saved.params) {
    order.push_back(wanted.at(name));
    specs.push_back({name, DType::F32, order.back()->file_shape});
  }
  for (auto& t : gpt2)
    if (!by_name.count(t.name)) {
      order.push_back(&t);
      specs.push_back({t.name, DType::F32, t.file_shape});
    }

  Metadata meta = gpt2_metadata(cfg);
  for (auto& [k, v] : saved.metadata) meta[k] = v;
  SafetensorsStreamWriter w(out_path, specs, meta);
  NoGradGuard ng;
  for (const Gpt2Tensor* t : order) {
    if (!by_name.count(t->name)) {
      w.append(t->name, Tensor::zeros(t->file_shape, DType::F32));
      continue;
    }
    // Only the rows the file keeps (wte: vocab_size of padded_vocab rows; they come first).
    const Shape file_zdl = t->conv1d ? Shape{t->file_shape[1], t->file_shape[0]} : t->file_shape;
    Tensor v = Tensor::empty(file_zdl, DType::F32);
    saved.read(t->name, v);
    w.append(t->name, t->conv1d ? transpose(v, 0, 1) : v);  // Linear (out, in) -> Conv1D (in, out)
  }
  w.commit();
}

}  // namespace zdl::io

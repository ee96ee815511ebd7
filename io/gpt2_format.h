// GPT-2 export and import: a zdl nn::GPT as a safetensors file with GPT-2's tensor names and
// layouts, the way the wider ecosystem's GPT-2 loaders expect them (HF transformers
// GPT2Model, nanoGPT's from_pretrained, llm.c's conversion scripts):
//
//   wte.weight                (V, C)       wpe.weight               (T, C)
//   h.{i}.ln_1.weight/bias    (C)          h.{i}.ln_2.weight/bias   (C)
//   h.{i}.attn.c_attn.weight  (C, 3C)      h.{i}.attn.c_attn.bias   (3C)
//   h.{i}.attn.c_proj.weight  (C, C)       h.{i}.attn.c_proj.bias   (C)
//   h.{i}.mlp.c_fc.weight     (C, 4C)      h.{i}.mlp.c_fc.bias      (4C)
//   h.{i}.mlp.c_proj.weight   (4C, C)      h.{i}.mlp.c_proj.bias    (C)
//   ln_f.weight/bias          (C)
//
// Choices:
// - The four projection weights are stored in GPT-2's Conv1D layout (in, out), the TRANSPOSE
//   of zdl's Linear (out, in); everything else has the same name and layout in both.
// - No lm_head.weight: GPT-2 ties it to wte. On import, "lm_head.weight" is ignored, a
//   "transformer." prefix (GPT2LMHeadModel files) is stripped, and the causal-mask buffers
//   "h.{i}.attn.bias" / "h.{i}.attn.masked_bias" of older HF files are ignored.
// - Vocabulary padding: the export writes the model's vocab_size rows of wte (padding rows are
//   never used by a real token and ecosystem configs say 50257, not 50304). The import takes
//   rows == the model's vocab_size (padding rows, if any, are zeroed) or rows == its padded
//   vocab (copied as they are); anything else is an error.
// - A model built with bias=false is exported with zero biases (HF GPT-2 always has them; a
//   zero bias is the same function); importing into such a model accepts only zero biases.
// - The export keeps the parameters' dtype; the import converts to the model's dtype.
// - Metadata (strings): format "pt" (transformers refuses other values), n_layer, n_head, n_embd, vocab_size,
//   padded_vocab_size, block_size.
//
//   io::export_gpt2(*model, "gpt2.safetensors");
//   nn::GPTConfig cfg = io::config_from_gpt2_file("gpt2.safetensors", {.n_head = 12});
//   auto fresh = std::make_shared<nn::GPT>(cfg);
//   io::load_gpt2(*fresh, "gpt2.safetensors");
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "nn/gpt.h"

namespace zdl::io {

// What a file cannot say about the architecture, and run-time settings.
struct GPT2ConfigOverrides {
  int64_t n_head = 0;             // 0: from the file's metadata (required when absent: HF files)
  std::string n_head_source;      // where n_head comes from, for messages ("": the overrides)
  int64_t padded_vocab_size = 0;  // 0: no padding
  double dropout = 0.0;
};

// One tensor of a GPT-2 file: its name (also the zdl parameter's name), its shape in the
// file, and how the file differs from the parameter.
struct Gpt2Tensor {
  std::string name;
  Shape file_shape;
  bool conv1d = false;  // stored (in, out): the transpose of zdl's Linear (out, in)
  bool bias = false;    // absent from a bias=false model (written as zeros)
};

// The file's tensors for a model of this config, in GPT-2's order; wte has vocab_size rows
// (padding rows are dropped). Shared by export_gpt2 and writers that stream the same layout
// (dist::consolidate_sharded).
std::vector<Gpt2Tensor> gpt2_layout(const nn::GPTConfig& cfg);

// The metadata export_gpt2 writes: format "pt", n_layer, n_head, n_embd, vocab_size,
// padded_vocab_size, block_size.
Metadata gpt2_metadata(const nn::GPTConfig& cfg);

// The size of export_gpt2's file for this config with parameters of `dtype` (the tensors' bytes
// and a bound on the header).
int64_t gpt2_file_bytes(const nn::GPTConfig& cfg, DType dtype);

// Writes the model (any device) to `path` atomically; extra metadata is merged in.
void export_gpt2(const nn::GPT& model, const std::string& path, const Metadata& extra_metadata = {});

// The architecture from the header only: n_layer from the count of h.{i} blocks (which must
// be 0..L-1), n_embd and vocab_size from wte, block_size from wpe rows, bias from ln_f.bias,
// n_head from metadata or overrides (an error if neither, or if they disagree).
nn::GPTConfig config_from_gpt2_file(const std::string& path, const GPT2ConfigOverrides& overrides = {});

// The GPT config as JSON text (the form checkpoints keep in metadata["config"]):
// {"vocab_size", "padded_vocab_size", "block_size", "n_layer", "n_head", "n_embd", "dropout",
// "bias"}.
std::string gpt_config_to_json(const nn::GPTConfig& cfg);

// Parses that text strictly (integers must be integers in range; padded_vocab_size, dropout and
// bias may be absent) and validates the config; errors start with `what`.
nn::GPTConfig gpt_config_from_json(const std::string& text, const std::string& what);

// A trained GPT kept in another form (a sharded checkpoint), as GPT-2 consolidation reads it:
// its parameters' names and zerodl shapes in the order they were saved, the GPT config JSON
// saved with it (empty: none), metadata for the file, and a reader of a parameter's first
// dst.numel() f32 values into dst (contiguous, f32).
struct SavedGpt {
  std::vector<std::pair<std::string, Shape>> params;
  std::string config_json;
  Metadata metadata;
  std::function<void(const std::string& name, const Tensor& dst)> read;
};

// Writes `saved` as one GPT-2 safetensors file (Conv1D layout, wte's padding rows dropped, zero
// biases for a bias=false model), streamed a parameter at a time, after checking that the
// parameters are exactly the GPT its config describes (one error lists every difference).
// Errors start with `what`.
void write_gpt2_consolidated(const SavedGpt& saved, const std::string& out_path, const std::string& what);

// Copies the file's weights into `model`. Checks every name and shape first and throws one
// error listing all problems (missing, unexpected, mis-shaped), leaving the model unchanged.
void load_gpt2(nn::GPT& model, const std::string& path);

}  // namespace zdl::io

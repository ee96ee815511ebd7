// Hugging Face-style model directories: the weights in GPT-2's layout (io/gpt2_format.h) as
// model.safetensors, next to the config.json transformers reads, so that
// GPT2LMHeadModel.from_pretrained(dir) loads the directory as is. train_gpt --export-hf and
// consolidate_checkpoint CK DIR write one; train_gpt --init-from DIR reads one.
//
//   io::check_hf_dir_destination("hf_model", io::gpt2_file_bytes(cfg, DType::F32));  // at startup
//   io::export_hf_dir(*model, "hf_model");                                            // at the end
//   nn::GPTConfig cfg = io::config_from_hf_dir("hf_model");
//
// The pair is written together: both files go into a staging directory that replaces `dir` in
// one rename (io/checkpoint_dir.h's protocol), so a kill never leaves new weights under an old
// config, and the debris of a killed export is cleared by the next one. What else `dir` holds
// (tokenizer files, a README) is carried over. A writer holds the directory's io::DirLock, so
// two processes never export into one directory at once.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "io/gpt2_format.h"

namespace zdl::io {

// The file names in such a directory.
inline constexpr const char* kHfWeightsFile = "model.safetensors";
inline constexpr const char* kHfConfigFile = "config.json";

// transformers' config.json for this model: n_positions, n_embd, n_layer, n_head, the real
// vocabulary (bos/eos = its last id, inside it), GELU's tanh form ("gelu_new"), LayerNorm's
// epsilon (nn::kGptLayerNormEps), no dropout, tied embeddings.
std::string hf_gpt2_config_json(const nn::GPTConfig& cfg);

// The model a directory holds: config.json read strictly and checked against the weights'
// header and zerodl's GPT, field by field (a config.json that disagrees is a damaged or foreign
// directory, and loading it would give another model than transformers does):
//   vocab_size, n_positions, n_embd, n_layer: required, and equal to the tensors' shapes;
//   n_head: required, divides n_embd, equal to the weights' metadata where they record it;
//   activation_function ("gelu_new" or its alias "gelu_pytorch_tanh"), layer_norm_epsilon,
//   tie_word_embeddings (true), n_inner (null or 4 n_embd), n_ctx (= n_positions), model_type
//   ("gpt2"), scale_attn_weights (true), scale_attn_by_inverse_layer_idx (false): where present,
//   zerodl's values (absent, transformers' defaults are zerodl's).
// Other keys (dropout rates, token ids, versions) do not change the function and are not read.
// overrides.n_head must be 0; padded_vocab_size and dropout are taken from `overrides`.
// Errors name the directory and the field.
nn::GPTConfig config_from_hf_dir(const std::string& dir, const GPT2ConfigOverrides& overrides = {});

// Throws unless such a directory can be written at `dir`: it names a directory (not "/", ".",
// ".."), no part of the path is a file, the parent exists and takes new files, `dir` is absent,
// empty, an earlier export or a zerodl checkpoint (a writer replaces the directory whole, so a
// project folder is refused), writable, and the parent's file system has `bytes` free (the
// model's file: gpt2_file_bytes). A symbolic link stands for the directory it points to.
// Returns that directory (links resolved): what a writer replaces, and what to lock. For a
// program to refuse a bad destination before its work rather than after it.
std::string check_hf_dir_destination(const std::string& dir, int64_t bytes = 0);

// Writes such a directory: write_weights(path) writes the GPT-2-layout weights to `path`, then
// config.json for `cfg` follows; both appear at `dir` together. Only `dir` is created (its parent
// must exist). Takes `dir`'s io::DirLock unless this process holds it already.
void write_hf_dir(const std::string& dir, const nn::GPTConfig& cfg,
                  const std::function<void(const std::string& weights_path)>& write_weights);

// A model's directory from a running program (export_gpt2 + config.json): under ZeRO-3 inside
// dist::GatheredParameters, written by one rank.
void export_hf_dir(const nn::GPT& model, const std::string& dir, const Metadata& extra_metadata = {});

}  // namespace zdl::io

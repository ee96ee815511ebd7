#include "nn/gpt.h"

#include <cmath>

namespace zdl::nn {

void GPTConfig::validate() const {
  ZDL_CHECK(vocab_size > 0, "GPT: vocab_size must be positive, got ", vocab_size);
  ZDL_CHECK(padded_vocab_size == 0 || padded_vocab_size >= vocab_size, "GPT: padded_vocab_size ", padded_vocab_size,
            " is smaller than vocab_size ", vocab_size);
  ZDL_CHECK(block_size > 0, "GPT: block_size (context length) must be positive, got ", block_size);
  ZDL_CHECK(n_layer > 0, "GPT: n_layer must be positive, got ", n_layer);
  ZDL_CHECK(n_head > 0, "GPT: n_head must be positive, got ", n_head);
  ZDL_CHECK(n_embd > 0 && n_embd % n_head == 0, "GPT: n_embd ", n_embd, " must be a positive multiple of n_head ",
            n_head);
  ZDL_CHECK(dropout >= 0.0 && dropout < 1.0, "GPT: dropout must be in [0, 1), got ", dropout);
}

double GPTConfig::num_parameters() const {
  const double C = static_cast<double>(n_embd), L = static_cast<double>(n_layer);
  // A block: 12 C^2 weights (qkv 3, proj 1, fc 4, fc-proj 4), biases 3C + C + 4C + C, and two
  // LayerNorms (weight, and bias when `bias`).
  const double block = 12 * C * C + (bias ? 9 * C + 4 * C : 2 * C);
  return static_cast<double>(padded_vocab()) * C + static_cast<double>(block_size) * C + L * block + (bias ? 2 : 1) * C;
}

double GPTConfig::training_flops_per_token(int64_t seq) const {
  return 6.0 * num_parameters() + 6.0 * static_cast<double>(n_layer) * static_cast<double>(n_embd) * static_cast<double>(seq);
}

GPT::GPT(const GPTConfig& cfg) : Module("GPT"), config(cfg) {
  cfg.validate();
  wte = register_module("wte", std::make_shared<Embedding>(EmbeddingOptions{cfg.padded_vocab(), cfg.n_embd, 0.02}));
  wpe = register_module("wpe", std::make_shared<Embedding>(EmbeddingOptions{cfg.block_size, cfg.n_embd, 0.02}));
  if (cfg.dropout > 0) drop = register_module("drop", std::make_shared<Dropout>(cfg.dropout));
  BlockOptions bo{cfg.n_embd, cfg.n_head, cfg.dropout, cfg.bias, 0.02, 0.02 / std::sqrt(2.0 * cfg.n_layer)};
  auto blocks = std::make_shared<Module>("ModuleList");
  for (int64_t i = 0; i < cfg.n_layer; ++i) h.push_back(blocks->register_module(std::to_string(i), std::make_shared<Block>(bo)));
  register_module("h", blocks);
  ln_f = register_module("ln_f", std::make_shared<LayerNorm>(LayerNormOptions{cfg.n_embd, kGptLayerNormEps, cfg.bias}));
}

Tensor GPT::hidden(const Tensor& ids) {
  check_defined(ids, "GPT", "ids");
  ZDL_CHECK(ids.dim() == 2, "GPT: ids must be [B, T], got shape=", shape_str(ids.shape()));
  const int64_t T = ids.size(1);
  ZDL_CHECK(T >= 1 && T <= config.block_size, "GPT: sequence length T=", T, " exceeds the context length block_size=",
            config.block_size);
  Tensor pos = Tensor::arange(T, DType::I64, ids.device());
  Tensor x = add((*wte)(ids), (*wpe)(pos));  // [B, T, C] + [T, C]
  if (drop) x = (*drop)(x);
  for (auto& block : h) x = (*block)(x);
  return (*ln_f)(x);
}

Tensor GPT::head(const Tensor& ids) {
  return linear(hidden(ids), wte->weight, Tensor());  // [B, T, Vp], tied LM head
}

Tensor GPT::logits(const Tensor& ids) {
  return call({ids}, [this](const TensorList& in) {
    Tensor logits = head(in[0]);
    if (config.padded_vocab() != config.vocab_size) logits = slice(logits, 2, 0, config.vocab_size);
    return TensorList{logits};  // [B, T, V]
  })[0];
}

Tensor GPT::loss(const Tensor& ids, const Tensor& targets) {
  check_defined(targets, "GPT::loss", "targets");
  ZDL_CHECK(targets.shape() == ids.shape(), "GPT::loss: targets shape=", shape_str(targets.shape()),
            " != ids shape=", shape_str(ids.shape()));
  return call({ids, targets}, [this](const TensorList& in) {
    // The padded logits as they are: cross_entropy reads the first V columns (no slice copy)
    // and writes the gradient over them.
    const int64_t BT = in[0].numel();
    return TensorList{cross_entropy(reshape(head(in[0]), {BT, config.padded_vocab()}), reshape(in[1], {BT}),
                                    /*ignore_index=*/-1, config.vocab_size)};
  })[0];
}

std::string GPT::extra_repr() const {
  return detail::str("vocab=", config.vocab_size, config.padded_vocab() != config.vocab_size
                                                       ? detail::str(" (padded ", config.padded_vocab(), ")")
                                                       : std::string(),
                     ", block_size=", config.block_size, ", n_layer=", config.n_layer, ", n_head=", config.n_head,
                     ", n_embd=", config.n_embd);
}

}  // namespace zdl::nn

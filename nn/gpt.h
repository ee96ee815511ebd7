// GPT-2: token + learned position embeddings, L pre-LN blocks, final LayerNorm, LM head tied
// to the token embedding. Init as GPT-2: N(0, 0.02) weights, zero biases, residual
// projections N(0, 0.02 / sqrt(2L)).
//
//   nn::GPTConfig cfg{.vocab_size = 256, .block_size = 128, .n_layer = 4, .n_head = 4, .n_embd = 128};
//   auto model = std::make_shared<nn::GPT>(cfg);
//   Tensor logits = model->logits(ids);          // ids [B, T] -> [B, T, V]
//   Tensor loss = model->loss(ids, targets);     // mean cross-entropy, shape []
#pragma once
#include <memory>
#include <vector>

#include "nn/transformer.h"

namespace zdl::nn {

struct GPTConfig {
  int64_t vocab_size = 256;
  int64_t padded_vocab_size = 0;  // 0: same as vocab_size; GPT-2 uses 50304 for 50257
  int64_t block_size = 128;       // context length (rows of wpe)
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  double dropout = 0.0;
  bool bias = true;

  int64_t padded_vocab() const { return padded_vocab_size > 0 ? padded_vocab_size : vocab_size; }
  // The model's parameter count, without building it (in double: checked before any
  // allocation, for configs far too large to build): wte (padded) + wpe + L blocks + ln_f.
  double num_parameters() const;
  // Floating-point operations to train on one token at sequence length `seq`, as llm.c and the
  // PaLM paper count them for MFU: 6 per parameter (forward 2, backward 4, of the matrix
  // products) plus attention's scores and weighted sums, 6 L C T.
  double training_flops_per_token(int64_t seq) const;
  // Throws with a message naming the bad field.
  void validate() const;
};

class GPT : public Module {
 public:
  explicit GPT(const GPTConfig& cfg);

  // ids [B, T] (i32/i64, T <= block_size) -> logits [B, T, vocab_size] (padding sliced off).
  Tensor logits(const Tensor& ids);
  // Mean cross-entropy of the next-token predictions; targets [B, T].
  Tensor loss(const Tensor& ids, const Tensor& targets);
  Tensor forward(const Tensor& ids) override { return logits(ids); }
  std::string extra_repr() const override;

  GPTConfig config;
  std::shared_ptr<Embedding> wte;  // (Vp, C), also the LM head
  std::shared_ptr<Embedding> wpe;  // (block_size, C)
  std::vector<std::shared_ptr<Block>> h;
  std::shared_ptr<LayerNorm> ln_f;
  std::shared_ptr<Dropout> drop;

 private:
  Tensor hidden(const Tensor& ids);  // [B, T, C] after ln_f
  Tensor head(const Tensor& ids);    // [B, T, Vp] logits (padding included), no hooks
};

}  // namespace zdl::nn

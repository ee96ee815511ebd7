// Transformer pieces of GPT-2: causal self-attention with a fused QKV projection, the MLP,
// and the pre-LayerNorm residual Block.
//
//   auto block = std::make_shared<nn::Block>(nn::BlockOptions{.n_embd = 128, .n_head = 4});
//   Tensor y = (*block)(x);   // x, y: [B, T, C]
#pragma once
#include <memory>

#include "nn/layers.h"

namespace zdl::nn {

// GPT-2's LayerNorm epsilon, in every LayerNorm of a Block and of nn::GPT (exports state it).
inline constexpr double kGptLayerNormEps = 1e-5;

struct BlockOptions {
  int64_t n_embd = 0;         // C
  int64_t n_head = 0;         // NH (HS = C / NH)
  double dropout = 0.0;
  bool bias = true;
  double init_std = 0.02;
  double residual_std = 0.02;  // std of the residual projections (GPT-2: 0.02 / sqrt(2 L))
};

// y = c_proj(attention(split_heads(c_attn(x)))), causal.
class CausalSelfAttention : public Module {
 public:
  explicit CausalSelfAttention(const BlockOptions& o);
  Tensor forward(const Tensor& x) override;  // [B, T, C] -> [B, T, C]
  std::string extra_repr() const override;

  BlockOptions options;
  std::shared_ptr<Linear> c_attn;  // (3C, C): q, k, v stacked
  std::shared_ptr<Linear> c_proj;  // (C, C)
  std::shared_ptr<Dropout> attn_dropout, resid_dropout;
};

// y = c_proj(gelu(c_fc(x))), hidden 4C.
class MLP : public Module {
 public:
  explicit MLP(const BlockOptions& o);
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<Linear> c_fc;    // (4C, C)
  std::shared_ptr<Linear> c_proj;  // (C, 4C)
  std::shared_ptr<Dropout> dropout;
};

// x = x + attn(ln_1(x)); x = x + mlp(ln_2(x)).
class Block : public Module {
 public:
  explicit Block(const BlockOptions& o);
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<MLP> mlp;
};

}  // namespace zdl::nn

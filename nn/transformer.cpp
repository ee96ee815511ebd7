#include "nn/transformer.h"

namespace zdl::nn {

CausalSelfAttention::CausalSelfAttention(const BlockOptions& o) : Module("CausalSelfAttention"), options(o) {
  ZDL_CHECK(o.n_embd > 0 && o.n_head > 0 && o.n_embd % o.n_head == 0, "CausalSelfAttention: n_embd ", o.n_embd,
            " must be a positive multiple of n_head ", o.n_head);
  c_attn = register_module("c_attn", std::make_shared<Linear>(LinearOptions{o.n_embd, 3 * o.n_embd, o.bias, o.init_std}));
  c_proj = register_module("c_proj", std::make_shared<Linear>(LinearOptions{o.n_embd, o.n_embd, o.bias, o.residual_std}));
  if (o.dropout > 0) {
    attn_dropout = register_module("attn_dropout", std::make_shared<Dropout>(o.dropout));
    resid_dropout = register_module("resid_dropout", std::make_shared<Dropout>(o.dropout));
  }
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  ZDL_CHECK(x.dim() == 3 && x.size(2) == options.n_embd, "CausalSelfAttention: expected x [B, T, ", options.n_embd,
            "], got shape=", shape_str(x.shape()));
  const int64_t B = x.size(0), T = x.size(1), C = options.n_embd, NH = options.n_head, HS = C / NH;
  Tensor qkv = (*c_attn)(x);                                    // [B, T, 3C]
  auto parts = split(qkv, C, 2);                                // 3 x [B, T, C]
  auto heads = [&](const Tensor& t) { return transpose(reshape(t, {B, T, NH, HS}), 1, 2); };  // [B, NH, T, HS]
  Tensor y = causal_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]));  // [B, NH, T, HS]
  if (attn_dropout) y = (*attn_dropout)(y);
  y = reshape(transpose(y, 1, 2), {B, T, C});                   // [B, T, C]
  y = (*c_proj)(y);
  if (resid_dropout) y = (*resid_dropout)(y);
  return y;
}

std::string CausalSelfAttention::extra_repr() const {
  return detail::str("n_embd=", options.n_embd, ", n_head=", options.n_head);
}

MLP::MLP(const BlockOptions& o) : Module("MLP") {
  c_fc = register_module("c_fc", std::make_shared<Linear>(LinearOptions{o.n_embd, 4 * o.n_embd, o.bias, o.init_std}));
  c_proj = register_module("c_proj",
                           std::make_shared<Linear>(LinearOptions{4 * o.n_embd, o.n_embd, o.bias, o.residual_std}));
  if (o.dropout > 0) dropout = register_module("dropout", std::make_shared<Dropout>(o.dropout));
}

Tensor MLP::forward(const Tensor& x) {
  // One op where it can fuse the bias + GELU into the GEMMs on a GPU ([Note: GELU in the GEMM's
  // epilogue], kernels/cuda/matmul.h); the children's own calls where they have hooks or
  // checkpointing of their own.
  const bool one_op = x.device().is_cuda() && !c_fc->has_hooks() && !c_proj->has_hooks() &&
                      !c_fc->activation_checkpointing() && !c_proj->activation_checkpointing();
  Tensor y = one_op ? gelu_mlp(x, c_fc->weight, c_fc->bias, c_proj->weight, c_proj->bias)
                    : (*c_proj)(gelu((*c_fc)(x)));
  return dropout ? (*dropout)(y) : y;
}

Block::Block(const BlockOptions& o) : Module("Block") {
  ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(LayerNormOptions{o.n_embd, kGptLayerNormEps, o.bias}));
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(o));
  ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(LayerNormOptions{o.n_embd, kGptLayerNormEps, o.bias}));
  mlp = register_module("mlp", std::make_shared<MLP>(o));
}

Tensor Block::forward(const Tensor& x) {
  Tensor h = add(x, (*attn)((*ln_1)(x)));
  return add(h, (*mlp)((*ln_2)(h)));
}

}  // namespace zdl::nn

// Parameter groups as GPT-2 training uses them: weight decay on matrices (dim >= 2: linear
// and embedding weights), none on biases and LayerNorm parameters.
#pragma once
#include "nn/module.h"
#include "optim/optimizer.h"

namespace zdl::optim {

// Whether weight decay applies to a parameter: matrices (linear and embedding weights) yes;
// vectors (biases, LayerNorm) no. ZeroAdamW uses the same rule.
inline bool decays(const Tensor& p) { return p.dim() >= 2; }

// The model's parameters that require grad (frozen ones are left out: they are not trained, and
// an optimizer refuses them), in a decayed and a not-decayed group.
std::vector<ParamGroup> decay_groups(const nn::Module& model, double weight_decay);

}  // namespace zdl::optim

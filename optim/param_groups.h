// Parameter groups as GPT-2 training uses them: weight decay on matrices (dim >= 2: linear
// and embedding weights), none on biases and LayerNorm parameters.
#pragma once
#include "nn/module.h"
#include "optim/optimizer.h"

namespace zdl::optim {

std::vector<ParamGroup> decay_groups(const nn::Module& model, double weight_decay);

}  // namespace zdl::optim

#include "optim/param_groups.h"

namespace zdl::optim {

std::vector<ParamGroup> decay_groups(const nn::Module& model, double weight_decay) {
  ParamGroup decay{"decay", {}, weight_decay}, no_decay{"no_decay", {}, 0.0};
  for (auto& [name, p] : model.named_parameters())
    if (p.requires_grad()) (decays(p) ? decay : no_decay).params.push_back(p);  // frozen ones: not trained
  std::vector<ParamGroup> out;
  if (!decay.params.empty()) out.push_back(decay);
  if (!no_decay.params.empty()) out.push_back(no_decay);
  return out;
}

}  // namespace zdl::optim

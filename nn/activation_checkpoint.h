// Activation checkpointing (ZeRO-R's recompute; torch.utils.checkpoint): a module run under it
// keeps only its inputs from the forward pass. When the gradient of its outputs arrives, the
// backward runs the module's forward again, this time with a graph, and differentiates that.
// Memory: the activations of one checkpointed module at a time instead of all of them. Cost: one
// more forward of the module in every backward.
//
//   model->h[3]->set_activation_checkpointing();     // one module
//   nn::checkpoint_every(model->h, 2);                // blocks 0, 2, 4, ...
//
// [Note: exact recompute] The recompute is the same computation as the forward: the same kernels
// on the same inputs, the random counters of every module inside put back where the forward
// found them (Module::random_counters), and the nn::BatchPosition the forward ran under entered
// again. Outputs and gradients are therefore bit-identical to a run without checkpointing,
// dropout included. The recomputed outputs' shapes and dtypes are checked against the forward's.
//
// Under ZeRO-3 a checkpointed unit (a Block) recomputes after its backward pre-hook gathered its
// parameters for the backward and before its post-backward hook frees them: the recompute adds
// no all-gather, and traffic stays 3 Psi. A checkpointed module that contains ZeRO-3 units
// gathers each of them once more for the recompute (a forward gather without prefetch), and
// frees it again after.
//
// Rules for modules written by hand: the body given to Module::call runs again in backward, so
// it must capture what it uses by value (or `this`), not references to locals, and a tensor it
// captures must not need a gradient (pass such a tensor as an input); forward hooks of modules
// inside a checkpointed one run again in the recompute; a module that draws random numbers
// outside nn::Dropout overrides random_counters / set_random_counters. A checkpointed module may
// be called several times in one forward, except when its parameters carry post-accumulate hooks
// (a ZeRO unit's): each recompute accumulates them separately, so that is refused, naming it.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "nn/module.h"

namespace zdl::nn {

// Module::call's body under checkpointing (with grad mode on): runs body(inputs) without a
// graph and records one node whose backward recomputes and differentiates it.
TensorList checkpointed_forward(Module& m, const TensorList& inputs,
                                const std::function<TensorList(const TensorList&)>& body);

// Checkpoints modules[0], modules[every], modules[2 every], ...: every block for every = 1;
// every = 0 turns checkpointing off for all of them.
template <class M>
void checkpoint_every(const std::vector<std::shared_ptr<M>>& modules, int64_t every) {
  ZDL_CHECK(every >= 0, "checkpoint_every: every must be >= 0 (0: off), got ", every);
  for (size_t i = 0; i < modules.size(); ++i)
    modules[i]->set_activation_checkpointing(every > 0 && static_cast<int64_t>(i) % every == 0);
}

}  // namespace zdl::nn

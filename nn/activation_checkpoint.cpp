#include "nn/activation_checkpoint.h"

#include <optional>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "nn/batch_position.h"

namespace zdl::nn {

namespace {

// The module and every module below it.
std::vector<Module*> subtree(Module& m) {
  std::vector<Module*> out{&m};
  for (auto& [name, child] : m.named_modules(/*include_self=*/false)) out.push_back(child.get());
  return out;
}

using RandomState = std::vector<std::vector<uint64_t>>;

RandomState random_state(const std::vector<Module*>& modules) {
  RandomState s;
  for (Module* m : modules) s.push_back(m->random_counters());
  return s;
}

void set_random_state(const std::vector<Module*>& modules, const RandomState& s) {
  for (size_t i = 0; i < modules.size(); ++i)
    if (!s[i].empty()) modules[i]->set_random_counters(s[i]);
}

// Backward of a checkpointed call: [Note: exact recompute] in the header.
struct RecomputeNode final : autograd::Node {
  Module* module = nullptr;
  std::function<TensorList(const TensorList&)> body;
  TensorList inputs;             // detached: the values, not the graph (next_edges hold that)
  // The inputs' and parameters' versions: the recompute reads them again ([Note: saved
  // tensors changed in place], autograd/node.h).
  std::vector<autograd::SavedVersion> versions;
  RandomState random;            // the subtree's counters before the forward
  std::optional<BatchPosition::Record> position;

  std::string name() const override { return "ActivationCheckpoint(" + module->type_name() + ")"; }
  void release_saved() override {
    body = nullptr;
    inputs.clear();
    versions.clear();
    random.clear();
  }

  TensorList apply(TensorList grad_outputs) override {
    ZDL_CHECK(body != nullptr, "backward through the checkpointed ", module->type_name(),
              " a second time: its inputs were freed after the first backward (pass retain_graph=true to keep them)");
    autograd::check_saved_versions(name(), versions);
    const std::vector<Module*> modules = subtree(*module);
    const RandomState now = random_state(modules);  // put back afterwards: later forwards continue from here
    set_random_state(modules, random);
    struct Restore {
      const std::vector<Module*>& m;
      const RandomState& s;
      ~Restore() { set_random_state(m, s); }
    } restore{modules, now};
    // The forward's position, or none if it ran outside any (the backward may run inside one).
    std::optional<BatchPosition> pos;
    std::optional<BatchPosition::Hide> no_pos;
    if (position) pos.emplace(*position);
    else no_pos.emplace();

    TensorList xs, wanted;  // wanted: the inputs whose gradient the graph above needs
    for (size_t i = 0; i < inputs.size(); ++i) {
      Tensor x = inputs[i];
      if (x.defined() && next_edges[i].node) {
        x = x.detach();
        x.set_requires_grad(true);
        wanted.push_back(x);
      }
      xs.push_back(x);
    }
    TensorList ys;
    {
      EnableGradGuard grad;
      RecomputableForwardGuard as_forward;  // ops choose as the forward did, whatever needs grad
      ys = body(xs);
    }
    ZDL_CHECK(ys.size() == output_shapes.size(), name(), ": the recompute returned ", ys.size(),
              " outputs, the forward ", output_shapes.size(), " (the module's forward must be deterministic)");
    TensorList roots, grads;
    for (size_t i = 0; i < ys.size(); ++i) {
      ZDL_CHECK(ys[i].defined() && ys[i].shape() == output_shapes[i] && ys[i].dtype() == output_dtypes[i], name(),
                ": output ", i, " of the recompute has ",
                ys[i].defined() ? "shape=" + shape_str(ys[i].shape()) + " " + dtype_name(ys[i].dtype()) : "no value",
                ", the forward's had shape=", shape_str(output_shapes[i]), " ", dtype_name(output_dtypes[i]),
                " (the module's forward must compute the same thing twice)");
      if (grad_outputs[i].defined() && ys[i].requires_grad()) {
        roots.push_back(ys[i]);
        grads.push_back(grad_outputs[i]);
      }
    }
    TensorList got = roots.empty() ? TensorList(wanted.size()) : autograd::backward_within(roots, grads, wanted);
    TensorList out(inputs.size());
    for (size_t i = 0, k = 0; i < inputs.size(); ++i)
      if (inputs[i].defined() && next_edges[i].node) out[i] = got[k++];
    return out;
  }
};

}  // namespace

TensorList checkpointed_forward(Module& m, const TensorList& inputs,
                                const std::function<TensorList(const TensorList&)>& body) {
  bool needs_graph = autograd::needs_grad(inputs), hooked = false;
  for (const Tensor& p : m.parameters()) {
    needs_graph = needs_graph || p.requires_grad();
    const AutogradMeta* meta = p.autograd_meta_if();
    hooked = hooked || (meta && !meta->post_accumulate_hooks.empty());
  }
  if (!needs_graph) return body(inputs);
  // Two recomputes of one module accumulate its parameters in two sub-passes, so hooks meant to
  // run once per backward (ZeRO's reductions) would run after the first.
  if (auto prev = std::static_pointer_cast<RecomputeNode>(m.pending_recompute_.lock()); prev && prev->body && hooked)
    throw Error(detail::str(
        "activation checkpointing: ", m.type_name(), " is called a second time before the backward of its first call, "
        "and its parameters have post-accumulate hooks (a ZeRO unit, or hooks of your own) that would fire after the "
        "first call's recompute; checkpoint a module that runs once per forward (one around both calls), or call this "
        "one without checkpointing"));

  auto node = std::make_shared<RecomputeNode>();
  m.pending_recompute_ = node;
  node->module = &m;
  node->body = body;
  node->random = random_state(subtree(m));
  if (const BatchPosition* pos = BatchPosition::current()) node->position = pos->record();
  TensorList outputs;
  {
    NoGradGuard no_graph;
    RecomputableForwardGuard as_recomputed;  // ops choose their implementation as the recompute will
    outputs = body(inputs);
  }
  for (const Tensor& x : inputs) node->inputs.push_back(x.defined() ? x.detach() : x);
  for (const Tensor& t : node->inputs)
    if (t.defined()) node->versions.push_back(autograd::SavedVersion::of(t));
  for (const Tensor& p : m.parameters()) node->versions.push_back(autograd::SavedVersion::of(p));
  // Fresh tensors over the same bytes: an output may be an input or a parameter returned as is.
  for (Tensor& y : outputs) {
    ZDL_CHECK(y.defined(), m.type_name(), ": a checkpointed module must return defined tensors");
    y = y.detach();
  }
  autograd::connect(node, inputs, outputs);
  for (Tensor& y : outputs)  // integer outputs (ids passed along) have no gradient
    if (!is_floating(y.dtype())) {
      AutogradMeta& meta = y.autograd_meta();
      meta.requires_grad = false;
      meta.grad_fn = nullptr;
    }
  return outputs;
}

}  // namespace zdl::nn

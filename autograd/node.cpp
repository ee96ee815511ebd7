#include "autograd/node.h"

#include <atomic>

#include "autograd/grad_mode.h"

namespace zdl::autograd {

namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};
}

Node::Node() : sequence_nr(g_next_sequence_nr.fetch_add(1)) {}

SavedVersion SavedVersion::of(const Tensor& t) {
  return {t.storage(), t.storage()->version(), t.shape(), t.dtype()};
}

void check_saved_versions(const std::string& op, const std::vector<SavedVersion>& saved) {
  for (const SavedVersion& s : saved) {
    const Storage storage = s.storage.lock();
    if (!storage) continue;  // nobody holds it any more: nobody changed it
    ZDL_CHECK(storage->version() == s.version, "backward through '", op, "': a tensor it saved (shape=",
              shape_str(s.shape), ", ", dtype_name(s.dtype),
              storage->label().empty() ? std::string() : ", storage " + storage->label(),
              ") was changed in place after the forward (its storage is at version ", storage->version(),
              ", the forward saw ", s.version, "): the gradient would be computed from the new values. "
              "Change a copy (contiguous_copy()), or change it after backward");
  }
}

TensorList FunctionNode::apply(TensorList grad_outputs) {
  ZDL_CHECK(backward_ != nullptr, "backward through '", name_,
            "' a second time: its saved tensors were freed after the first backward "
            "(pass retain_graph=true to the first backward to keep them)");
  check_saved_versions(name_, saved_);
  return backward_(grad_outputs);
}

namespace {

std::vector<SavedVersion> versions_of(const TensorList& saved) {
  std::vector<SavedVersion> out;
  out.reserve(saved.size());
  for (const Tensor& t : saved)
    if (t.defined()) out.push_back(SavedVersion::of(t));
  return out;
}

}  // namespace

Edge gradient_edge(const Tensor& t) {
  if (!t.defined()) return {};
  AutogradMeta* m = t.autograd_meta_if();
  if (!m || !m->requires_grad) return {};
  if (m->grad_fn) return {m->grad_fn, m->output_nr};
  std::shared_ptr<Node> acc = m->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    acc->output_shapes = {t.shape()};
    acc->output_dtypes = {t.dtype()};
    acc->pre_hooks.resize(1);
    m->grad_accumulator = acc;
  }
  return {acc, 0};
}

bool needs_grad(const TensorList& inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

void connect(const std::shared_ptr<Node>& node, const TensorList& inputs, const TensorList& outputs) {
  node->next_edges.clear();
  for (const Tensor& t : inputs) node->next_edges.push_back(gradient_edge(t));
  node->num_outputs = static_cast<uint32_t>(outputs.size());
  node->pre_hooks.resize(outputs.size());
  node->output_shapes.clear();
  node->output_dtypes.clear();
  for (uint32_t i = 0; i < outputs.size(); ++i) {
    node->output_shapes.push_back(outputs[i].shape());
    node->output_dtypes.push_back(outputs[i].dtype());
    AutogradMeta& m = outputs[i].autograd_meta();
    m.requires_grad = true;
    m.grad_fn = node;
    m.output_nr = i;
  }
}

Tensor record(const std::string& name, const TensorList& inputs, Tensor output, FunctionNode::Backward backward,
              const TensorList& saved) {
  if (!needs_grad(inputs)) return output;
  auto node = std::make_shared<FunctionNode>(name, std::move(backward), versions_of(saved));
  connect(node, inputs, {output});
  return output;
}

TensorList record_multi(const std::string& name, const TensorList& inputs, TensorList outputs,
                        FunctionNode::Backward backward, const TensorList& saved) {
  if (!needs_grad(inputs)) return outputs;
  auto node = std::make_shared<FunctionNode>(name, std::move(backward), versions_of(saved));
  connect(node, inputs, outputs);
  return outputs;
}

}  // namespace zdl::autograd

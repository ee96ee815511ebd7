#include "autograd/node.h"

#include <atomic>

#include "autograd/grad_mode.h"

namespace zdl::autograd {

namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};
}

Node::Node() : sequence_nr(g_next_sequence_nr.fetch_add(1)) {}

TensorList FunctionNode::apply(TensorList grad_outputs) {
  ZDL_CHECK(backward_ != nullptr, "backward through '", name_,
            "' a second time: its saved tensors were freed after the first backward "
            "(pass retain_graph=true to the first backward to keep them)");
  return backward_(grad_outputs);
}

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

Tensor record(const std::string& name, const TensorList& inputs, Tensor output, FunctionNode::Backward backward) {
  if (!needs_grad(inputs)) return output;
  auto node = std::make_shared<FunctionNode>(name, std::move(backward));
  connect(node, inputs, {output});
  return output;
}

TensorList record_multi(const std::string& name, const TensorList& inputs, TensorList outputs,
                        FunctionNode::Backward backward) {
  if (!needs_grad(inputs)) return outputs;
  auto node = std::make_shared<FunctionNode>(name, std::move(backward));
  connect(node, inputs, outputs);
  return outputs;
}

}  // namespace zdl::autograd

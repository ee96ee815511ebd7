// Graph nodes of the dynamic autograd graph.
//
// Each differentiable op creates one Node holding what its backward needs (a closure over
// the saved tensors) and one Edge per differentiable input pointing at the input's producer
// (its grad_fn, or the AccumulateGrad node of a leaf). The engine (engine.h) walks nodes in
// dependency order. [Note: ordering] Nodes carry a sequence number; among ready nodes the
// engine runs the most recently created first, so backward visits modules in exact reverse
// forward order on every rank, which ZeRO-3's pre-backward gathers rely on.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace zdl::autograd {

using TensorList = std::vector<Tensor>;

struct Node;

struct Edge {
  std::shared_ptr<Node> node;  // null: this input needs no gradient
  uint32_t input_nr = 0;       // which gradient input of `node` this edge feeds
};

struct Node : std::enable_shared_from_this<Node> {
  Node();
  virtual ~Node() = default;

  // Gradients w.r.t. this node's outputs in, gradients w.r.t. its inputs out (one per edge;
  // undefined where an input needs none).
  virtual TensorList apply(TensorList grad_outputs) = 0;
  // Frees saved tensors once backward has run (unless the graph is retained).
  virtual void release_saved() {}
  virtual std::string name() const = 0;

  std::vector<Edge> next_edges;
  uint64_t sequence_nr;
  // Per output: hooks on the gradient arriving for that output (tensor hooks of non-leaves).
  std::vector<std::vector<std::function<Tensor(const Tensor&)>>> pre_hooks;
  // Number of outputs (gradient slots) of this node.
  uint32_t num_outputs = 1;
  // Shapes of the outputs, to check incoming gradients.
  std::vector<Shape> output_shapes;
  std::vector<DType> output_dtypes;
};

// [Note: saved tensors changed in place] A backward computes from the tensors its op saved; one
// changed in place after the forward (h.fill_(0) after y = sum(h * h), add_ into exp's output)
// would give wrong gradients without a word. So a node keeps each saved tensor's storage with
// its version (core/storage.h, [Note: version counter]) and refuses to run its backward when one
// moved, naming the op and the tensor.
struct SavedVersion {
  // Weak: the closure keeps the tensor alive, and a gradient may reuse a saved buffer only when
  // nothing else holds its storage (gradient_buffer).
  std::weak_ptr<StorageImpl> storage;
  uint64_t version = 0;
  Shape shape;
  DType dtype = DType::F32;
  static SavedVersion of(const Tensor& t);
};

// Throws if a saved tensor was changed in place since its node recorded it.
void check_saved_versions(const std::string& op, const std::vector<SavedVersion>& saved);

// A node whose backward is a closure. The closure owns the saved tensors; releasing the
// closure frees them (retain_graph=false). `saved` lists them for the in-place check.
struct FunctionNode final : Node {
  using Backward = std::function<TensorList(const TensorList& grad_outputs)>;
  FunctionNode(std::string name, Backward backward, std::vector<SavedVersion> saved = {})
      : name_(std::move(name)), backward_(std::move(backward)), saved_(std::move(saved)) {}
  TensorList apply(TensorList grad_outputs) override;
  void release_saved() override {
    backward_ = nullptr;
    saved_.clear();
  }
  std::string name() const override { return name_; }

 private:
  std::string name_;
  Backward backward_;
  std::vector<SavedVersion> saved_;
};

// The sink of a leaf tensor: adds incoming gradients into leaf.grad, then (once per backward
// pass, after the last contribution) runs the leaf's post-accumulate-grad hooks.
struct AccumulateGrad final : Node {
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {}
  TensorList apply(TensorList grad_outputs) override;
  std::string name() const override { return "AccumulateGrad"; }
  const std::shared_ptr<TensorImpl>& leaf() const { return leaf_; }

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

// The gradient sink of a tensor for building edges: its grad_fn or, for a leaf that requires
// grad, its (shared, lazily created) AccumulateGrad node. Null when no gradient is needed.
Edge gradient_edge(const Tensor& t);

// True when any input requires grad and grad mode is on: the op must record a node.
bool needs_grad(const TensorList& inputs);

// Records `node` as the producer of `outputs` (sets grad_fn, output_nr, requires_grad) and
// connects it to the inputs' gradient edges. Call only when needs_grad(inputs).
void connect(const std::shared_ptr<Node>& node, const TensorList& inputs, const TensorList& outputs);

// Convenience: builds a FunctionNode for one output and connects it when needed. `saved`: the
// tensors the closure keeps for its backward (inputs, the output, or copies of them), checked
// for in-place changes before it runs ([Note: saved tensors changed in place]).
//   return record("mul", {a, b}, out, [a, b](const TensorList& g) { return TensorList{g[0] * b, g[0] * a}; },
//                 {a, b});
Tensor record(const std::string& name, const TensorList& inputs, Tensor output, FunctionNode::Backward backward,
              const TensorList& saved = {});
TensorList record_multi(const std::string& name, const TensorList& inputs, TensorList outputs,
                        FunctionNode::Backward backward, const TensorList& saved = {});

}  // namespace zdl::autograd

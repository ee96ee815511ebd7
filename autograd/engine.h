// The backward engine: runs a graph from its roots in dependency order.
//
// Gradients of a node's outputs are summed from all consumers before the node runs. Nodes
// are ready when all their consumers have run; among ready nodes the newest (highest
// sequence number) runs first ([Note: ordering] in node.h). Backward temporaries are
// accounted as activations; leaf .grad buffers as gradients.
//
//   zdl::autograd::backward({loss}, {}, /*retain_graph=*/false);
#pragma once
#include "autograd/node.h"

namespace zdl::autograd {

// grads[i] is the gradient for roots[i]; undefined means ones (allowed only for one-element roots).
void backward(const TensorList& roots, const TensorList& grads, bool retain_graph);

// Inside a running backward pass (from a node's apply): runs the graph below `roots`, seeded
// with `grads` as backward() does, and returns the gradients that reach `inputs` (leaves that
// require grad, whose own .grad is left alone) instead of accumulating them. Other leaves
// accumulate as usual, with their hooks. Activation checkpointing (nn/activation_checkpoint.h)
// differentiates a recomputed module with it.
TensorList backward_within(const TensorList& roots, const TensorList& grads, const TensorList& inputs);

// Queues f to run once the current backward pass has run every node (FIFO; callbacks may
// queue more). Only valid while a backward pass runs on this thread (e.g. from a hook).
void queue_callback(std::function<void()> f);

// True while a backward pass runs on this thread.
bool in_backward();

// The running backward pass's number on this thread (1, 2, ... in the order they started; a
// backward_within belongs to its pass), 0 outside one: state kept per pass (module hooks) tells
// a new pass from the same one.
uint64_t backward_pass();

// True while a backward pass that keeps the saved tensors (retain_graph) runs on this thread: a
// node may then not reuse its saved buffers for its gradients.
bool graph_retained();

}  // namespace zdl::autograd

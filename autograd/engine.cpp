#include "autograd/engine.h"

#include <algorithm>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"

namespace zdl::autograd {

namespace {

struct NewestFirst {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr < b->sequence_nr; }
};

// `from`: where the gradient came from when not from the graph itself (a hook).
void check_grad_matches(const Node& node, uint32_t slot, const Tensor& g, const char* from = "") {
  if (!g.defined() || slot >= node.output_shapes.size()) return;
  ZDL_CHECK(g.shape() == node.output_shapes[slot], "backward: gradient", from, " for output ", slot, " of ",
            node.name(), " has shape=", shape_str(g.shape()), " but the output has shape=",
            shape_str(node.output_shapes[slot]));
  if (slot < node.output_dtypes.size())
    ZDL_CHECK(g.dtype() == node.output_dtypes[slot], "backward: gradient", from, " for output ", slot, " of ",
              node.name(), " has dtype ", dtype_name(g.dtype()), " but the output has dtype ",
              dtype_name(node.output_dtypes[slot]));
}

// Per-thread state of the running backward pass (passes do not nest on one thread).
struct BackwardState {
  bool running = false;
  bool retain_graph = false;
  uint64_t pass = 0, passes = 0;  // the running pass's number (0: none), and how many started
  std::vector<std::function<void()>> callbacks;
};
thread_local BackwardState t_backward;

}  // namespace

void queue_callback(std::function<void()> f) {
  ZDL_CHECK(t_backward.running, "queue_callback outside a backward pass");
  t_backward.callbacks.push_back(std::move(f));
}

bool in_backward() { return t_backward.running; }

uint64_t backward_pass() { return t_backward.pass; }

bool graph_retained() { return t_backward.running && t_backward.retain_graph; }

TensorList AccumulateGrad::apply(TensorList grad_outputs) {
  Tensor g = grad_outputs.at(0);
  if (!g.defined()) return {};
  Tensor leaf(leaf_);
  AutogradMeta& m = leaf.autograd_meta();
  for (auto& hook : m.leaf_hooks) {
    Tensor replaced = hook(g);
    if (replaced.defined()) g = replaced;
  }
  ZDL_CHECK(g.shape() == leaf.shape() && g.dtype() == leaf.dtype(), "AccumulateGrad: gradient shape=",
            shape_str(g.shape()), " dtype ", dtype_name(g.dtype()), " for a leaf of shape=", shape_str(leaf.shape()),
            " dtype ", dtype_name(leaf.dtype()), leaf.name().empty() ? "" : " ('" + leaf.name() + "')",
            m.leaf_hooks.empty() ? "" : " (after its hooks)");
  if (m.grad) {
    // Accumulate in place: the grad may be a view into a flat buffer owned by the ZeRO manager.
    add_(Tensor(m.grad), g);
  } else {
    MemoryScope scope(MemoryCategory::Gradient);
    Tensor fresh = Tensor::empty(leaf.shape(), leaf.dtype(), leaf.device());
    fresh.copy_(g);
    m.grad = fresh.impl_ptr();
  }
  for (auto& hook : m.post_accumulate_hooks) hook(leaf);
  return {};
}

namespace {

using Seeds = std::vector<std::pair<Edge, Tensor>>;

// Runs every node reachable from the seeds, newest ready node first ([Note: ordering]). The
// nodes in `capture` are not run: the gradient summed for each is returned instead, in order.
TensorList run_graph(const Seeds& seeds, bool retain_graph, const std::vector<Node*>& capture) {
  // Count, for every reachable node, how many edges lead into it.
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack;
  std::unordered_set<Node*> seen;
  for (auto& s : seeds)
    if (s.first.node && seen.insert(s.first.node.get()).second) stack.push_back(s.first.node.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.node) continue;
      ++deps[e.node.get()];
      if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
    }
  }

  std::unordered_map<Node*, TensorList> buffers;
  std::unordered_map<Node*, std::shared_ptr<Node>> keep_alive;
  auto add_to_buffer = [&](const Edge& e, const Tensor& g) {
    if (!e.node || !g.defined()) return;
    keep_alive.emplace(e.node.get(), e.node);
    TensorList& buf = buffers[e.node.get()];
    if (buf.size() < e.node->num_outputs) buf.resize(e.node->num_outputs);
    Tensor& slot = buf[e.input_nr];
    slot = slot.defined() ? add(slot, g) : g;
  };
  for (auto& s : seeds) add_to_buffer(s.first, s.second);

  std::priority_queue<Node*, std::vector<Node*>, NewestFirst> ready;
  for (auto& s : seeds)
    if (s.first.node && deps[s.first.node.get()] == 0) ready.push(s.first.node.get());
  std::unordered_set<Node*> queued;
  TensorList captured(capture.size());

  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    if (!queued.insert(n).second) continue;
    TensorList in = std::move(buffers[n]);
    buffers.erase(n);
    in.resize(n->num_outputs);
    if (auto it = std::find(capture.begin(), capture.end(), n); it != capture.end()) {
      captured[static_cast<size_t>(it - capture.begin())] = in[0];
      keep_alive.erase(n);
      continue;
    }
    for (uint32_t i = 0; i < in.size(); ++i) {
      check_grad_matches(*n, i, in[i]);
      if (i < n->pre_hooks.size())
        for (auto& hook : n->pre_hooks[i]) {
          if (!in[i].defined()) break;
          Tensor replaced = hook(in[i]);
          if (!replaced.defined()) continue;
          check_grad_matches(*n, i, replaced, " returned by a hook");  // the kernels trust it
          in[i] = replaced;
        }
    }
    TensorList out = n->apply(std::move(in));
    if (!retain_graph) n->release_saved();
    ZDL_CHECK(out.size() == n->next_edges.size() || out.empty(), "backward: ", n->name(), " returned ", out.size(),
              " gradients for ", n->next_edges.size(), " inputs");
    for (size_t i = 0; i < out.size(); ++i) {
      const Edge& e = n->next_edges[i];
      if (!e.node) continue;
      add_to_buffer(e, out[i]);
    }
    for (const Edge& e : n->next_edges) {
      if (!e.node) continue;
      if (--deps[e.node.get()] == 0) ready.push(e.node.get());
    }
    keep_alive.erase(n);
  }
  return captured;
}

// The root gradients, routed to the roots' gradient edges.
Seeds seeds_of(const TensorList& roots, const TensorList& grads) {
  ZDL_CHECK(grads.empty() || grads.size() == roots.size(), "backward: ", roots.size(), " roots but ", grads.size(),
            " gradients");
  Seeds seeds;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    check_defined(r, "backward", "root");
    ZDL_CHECK(r.requires_grad(), "backward: tensor of shape=", shape_str(r.shape()),
              " does not require grad (no input of its computation has requires_grad=true)");
    Tensor g = grads.empty() ? Tensor() : grads[i];
    if (!g.defined()) {
      ZDL_CHECK(r.numel() == 1, "backward: a gradient can be implied only for a one-element output, got shape=",
                shape_str(r.shape()), "; pass a gradient of that shape");
      g = Tensor::ones(r.shape(), r.dtype(), r.device());
    }
    ZDL_CHECK(g.shape() == r.shape(), "backward: gradient shape=", shape_str(g.shape()), " != output shape=",
              shape_str(r.shape()));
    ZDL_CHECK(g.dtype() == r.dtype(), "backward: gradient dtype ", dtype_name(g.dtype()), " != output dtype ",
              dtype_name(r.dtype()), " (shape=", shape_str(r.shape()), ")");
    seeds.push_back({gradient_edge(r), g});
  }
  return seeds;
}

}  // namespace

void backward(const TensorList& roots, const TensorList& grads, bool retain_graph) {
  NoGradGuard no_grad;
  MemoryScope scope(MemoryCategory::Activation);
  ZDL_CHECK(!t_backward.running, "backward called from inside a backward pass (reentrant backward is not supported)");
  t_backward.running = true;
  t_backward.retain_graph = retain_graph;
  t_backward.pass = ++t_backward.passes;
  t_backward.callbacks.clear();
  struct Reset {
    ~Reset() {
      t_backward.running = false;
      t_backward.pass = 0;
      t_backward.callbacks.clear();
    }
  } reset;
  run_graph(seeds_of(roots, grads), retain_graph, {});
  for (size_t i = 0; i < t_backward.callbacks.size(); ++i) {
    auto cb = std::move(t_backward.callbacks[i]);
    cb();
  }
}

TensorList backward_within(const TensorList& roots, const TensorList& grads, const TensorList& inputs) {
  ZDL_CHECK(t_backward.running, "backward_within outside a backward pass");
  NoGradGuard no_grad;
  std::vector<Node*> capture;
  std::vector<std::shared_ptr<Node>> owners;  // the inputs' gradient sinks, alive while the graph runs
  for (const Tensor& x : inputs) {
    ZDL_CHECK(x.is_leaf() && x.requires_grad(), "backward_within: every input must be a leaf that requires grad");
    owners.push_back(gradient_edge(x).node);
    capture.push_back(owners.back().get());
  }
  return run_graph(seeds_of(roots, grads), /*retain_graph=*/false, capture);
}

}  // namespace zdl::autograd

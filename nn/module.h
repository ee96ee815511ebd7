// Module: the base of every model piece, in the shape of PyTorch's C++ frontend.
//
// A module keeps parameters, buffers and children in registration order, by name. Names may
// not be empty or contain dots; `named_parameters()` yields full dotted names
// ("h.0.attn.c_attn.weight"). Parameters are created through the ParameterFactory on top of
// the thread's stack (nn/parameter_factory.h), which the ZeRO partition manager can replace.
//
// Hooks (the partition manager is built on them; each registration returns a handle whose
// remove() unregisters it):
// - forward pre-hooks / post-hooks run around `forward` when a module is called through
//   `call` / operator();
// - backward pre-hooks run when the gradient of the module's output first arrives, in each
//   backward pass (a retained graph run twice runs them twice);
// - post-backward hooks run once per backward pass that reaches the module's outputs, after
//   every parameter of the module (recursively) that received a gradient has it fully
//   accumulated; parameters that got no gradient in that pass are waited for only until the end
//   of the backward pass.
//
//   struct TwoLayer : nn::Module {
//     std::shared_ptr<nn::Linear> fc1, fc2;
//     TwoLayer() { fc1 = register_module("fc1", std::make_shared<nn::Linear>(8, 16));
//                  fc2 = register_module("fc2", std::make_shared<nn::Linear>(16, 1)); }
//     Tensor forward(const Tensor& x) override { return (*fc2)(gelu((*fc1)(x))); }
//   };
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "autograd/ops.h"
#include "nn/init.h"

namespace zdl::autograd {
struct Node;
}

namespace zdl::nn {

using TensorList = std::vector<Tensor>;
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Returned by a hook registration: remove() unregisters that hook (once; a no-op once the
// module is gone). Not from inside a hook of the same module.
class HookHandle {
 public:
  HookHandle() = default;
  void remove();

 private:
  friend class Module;
  struct Table;
  HookHandle(std::weak_ptr<Table> table, uint64_t id) : table_(std::move(table)), id_(id) {}
  std::weak_ptr<Table> table_;
  uint64_t id_ = 0;
};

class Module : public std::enable_shared_from_this<Module> {
 public:
  using ForwardPreHook = std::function<void(Module&, const TensorList& inputs)>;
  using ForwardPostHook = std::function<void(Module&, const TensorList& inputs, const TensorList& outputs)>;
  using BackwardHook = std::function<void(Module&)>;

  explicit Module(std::string type_name = "Module") : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // ---- structure ----
  // Registers a parameter created by the current ParameterFactory; returns it (a leaf that
  // requires grad).
  Tensor register_parameter(const std::string& name, const Shape& shape, const Init& init);
  // Registers an existing tensor as a parameter (e.g. a weight shared with another module).
  Tensor register_parameter(const std::string& name, Tensor tensor);
  // Buffers are state that is saved but not trained (e.g. a causal mask).
  Tensor register_buffer(const std::string& name, Tensor tensor);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> child) {
    register_module_impl(name, child);
    return child;
  }

  // Full dotted names, registration order, each tensor once (a tied weight appears under the
  // first name it was registered with).
  NamedTensors named_parameters(bool recurse = true) const;
  TensorList parameters(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules(bool include_self = true) const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }
  // Direct parameters of this module only (local names).
  const NamedTensors& local_parameters() const { return params_; }
  int64_t num_parameters() const;

  const std::string& type_name() const { return type_name_; }
  // One line of settings shown in the printout, e.g. "in=768, out=3072, bias=true".
  virtual std::string extra_repr() const { return ""; }
  // The module tree with shapes and parameter counts.
  std::string to_string() const;

  // ---- mode ----
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // ---- state ----
  // Parameters then buffers, full names, registration order.
  NamedTensors state_dict() const;
  // Copies values in. strict: missing, unexpected and mis-shaped entries are all named in one
  // error, and nothing is copied when there is any.
  void load_state_dict(const std::map<std::string, Tensor>& state, bool strict = true);
  void zero_grad();

  // ---- forward ----
  // Single-tensor forward; modules with other signatures define their own and wrap the body
  // in `call`.
  virtual Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x);
  // Runs body(inputs) with this module's hooks around it.
  TensorList call(const TensorList& inputs, const std::function<TensorList(const TensorList&)>& body);

  // ---- activation checkpointing ----
  // On: a call keeps only this module's inputs from the forward, and the backward computes
  // the forward again to differentiate it (nn/activation_checkpoint.h). Hooks run as without.
  void set_activation_checkpointing(bool on = true) { checkpoint_activations_ = on; }
  bool activation_checkpointing() const { return checkpoint_activations_; }

  // The counters of the random draws this module's own forward makes (nn::Dropout's), so a
  // checkpointed forward can be replayed with the same draws. A module that draws random
  // numbers in forward by other means overrides both.
  virtual std::vector<uint64_t> random_counters() const { return {}; }
  virtual void set_random_counters(const std::vector<uint64_t>& counters) { (void)counters; }

  // ---- hooks ----
  HookHandle register_forward_pre_hook(ForwardPreHook h);
  HookHandle register_forward_post_hook(ForwardPostHook h);
  HookHandle register_backward_pre_hook(BackwardHook h);
  HookHandle register_post_backward_hook(BackwardHook h);
  // Whether any hook is registered (a module that fuses its children's ops keeps their calls
  // when one has hooks).
  bool has_hooks() const;

 private:
  void register_module_impl(const std::string& name, const std::shared_ptr<Module>& child);
  void check_name(const std::string& name, const char* what) const;
  void rename_tree(const std::string& prefix, std::unordered_set<const Module*>& seen);
  void collect(NamedTensors Module::*list, const std::string& prefix, NamedTensors& out,
               std::vector<const TensorImpl*>& seen, bool recurse) const;
  bool arm_post_backward(uint64_t pass);  // false: already armed or fired in this pass
  HookHandle::Table& hook_table();
  void to_string_impl(std::string& out, const std::string& name, int depth) const;

  std::string type_name_;
  bool training_ = true;
  bool checkpoint_activations_ = false;
  std::weak_ptr<autograd::Node> pending_recompute_;  // the last checkpointed call's backward node
  friend TensorList checkpointed_forward(Module&, const TensorList&, const std::function<TensorList(const TensorList&)>&);
  NamedTensors params_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  std::string full_prefix_;  // dotted path from the root, set when registered as a child

  std::shared_ptr<HookHandle::Table> hooks_;  // the four lists, shared with the handles

  // Post-backward bookkeeping: parameters still awaited in the current backward pass.
  struct PostBackwardState;
  std::shared_ptr<PostBackwardState> post_state_;
};

}  // namespace zdl::nn

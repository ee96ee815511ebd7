#include "nn/module.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <unordered_set>

#include "autograd/engine.h"
#include "nn/activation_checkpoint.h"
#include "nn/parameter_factory.h"

namespace zdl::nn {

// Kept per backward pass (autograd::backward_pass()): armed when the first gradient of the
// pass reaches one of the module's outputs, fired once in that pass.
struct Module::PostBackwardState {
  int expected = 0;   // distinct parameters (recursive) that require grad
  int remaining = 0;  // still awaited in the armed pass
  uint64_t armed_pass = 0, fired_pass = 0;

  bool fire(uint64_t pass) {  // whether the hooks run now: once per pass, if armed in it
    if (pass == 0 || armed_pass != pass) return false;
    armed_pass = 0;
    fired_pass = pass;
    return true;
  }
};

void Module::check_name(const std::string& name, const char* what) const {
  ZDL_CHECK(!name.empty(), type_name_, ": ", what, " name must not be empty");
  ZDL_CHECK(name.find('.') == std::string::npos, type_name_, ": ", what, " name '", name,
            "' must not contain '.' (dots separate the levels of full names)");
  auto taken = [&](const auto& list) {
    return std::any_of(list.begin(), list.end(), [&](const auto& kv) { return kv.first == name; });
  };
  ZDL_CHECK(!taken(params_) && !taken(buffers_) && !taken(children_), type_name_, ": ", what, " name '", name,
            "' is already registered in this module");
}

Tensor Module::register_parameter(const std::string& name, const Shape& shape, const Init& init) {
  check_name(name, "parameter");
  ParameterSpec spec;
  spec.owner = this;
  spec.local_name = name;
  spec.shape = shape;
  spec.init = init;
  InitContext::assign(spec);
  Tensor t = current_parameter_factory().create(spec);
  return register_parameter(name, t);
}

Tensor Module::register_parameter(const std::string& name, Tensor tensor) {
  check_name(name, "parameter");
  check_defined(tensor, "register_parameter", name.c_str());
  ZDL_CHECK(tensor.is_leaf(), type_name_, ": parameter '", name, "' must be a leaf tensor (detach it first)");
  if (!tensor.requires_grad()) tensor.set_requires_grad(true);
  if (tensor.name().empty()) {
    tensor.set_name(full_prefix_ + name);
    tensor.storage()->set_label(full_prefix_ + name);
  }
  params_.emplace_back(name, tensor);
  return tensor;
}

Tensor Module::register_buffer(const std::string& name, Tensor tensor) {
  check_name(name, "buffer");
  check_defined(tensor, "register_buffer", name.c_str());
  if (tensor.name().empty()) tensor.set_name(full_prefix_ + name);
  buffers_.emplace_back(name, tensor);
  return tensor;
}

void Module::register_module_impl(const std::string& name, const std::shared_ptr<Module>& child) {
  check_name(name, "module");
  ZDL_CHECK(child != nullptr, type_name_, ": module '", name, "' is null");
  ZDL_CHECK(child.get() != this, type_name_, ": a module cannot be its own child");
  // Nor its own descendant: a cycle (a -> b -> a) made every walk of the tree (named_parameters,
  // train(), rename_tree) recurse until the stack overflowed.
  std::vector<const Module*> stack{child.get()};
  while (!stack.empty()) {
    const Module* m = stack.back();
    stack.pop_back();
    for (const auto& [n, c] : m->children_) {
      ZDL_CHECK(c.get() != this, type_name_, ": module '", name, "' (", child->type_name(),
                ") holds this module among its descendants; registering it would make a cycle");
      stack.push_back(c.get());
    }
  }
  children_.emplace_back(name, child);
  // Names follow named_parameters(): this module's whole subtree in its order, a module reached
  // twice (registered under two parents) keeping its first path. Renaming the new child alone
  // gave a shared module the path of its last registration, where named_parameters() lists it
  // under its first.
  std::unordered_set<const Module*> seen;
  rename_tree(full_prefix_, seen);
}

void Module::rename_tree(const std::string& prefix, std::unordered_set<const Module*>& seen) {
  if (!seen.insert(this).second) return;
  auto rename = [&](NamedTensors& list) {
    for (auto& [local, t] : list) {
      // Rename only tensors named by this module's registration (a tied weight keeps the
      // name of the module that created it).
      if (t.name().empty() || t.name() == full_prefix_ + local) {
        t.set_name(prefix + local);
        t.storage()->set_label(prefix + local);
      }
    }
  };
  rename(params_);
  rename(buffers_);
  full_prefix_ = prefix;
  for (auto& [name, child] : children_) child->rename_tree(prefix + name + ".", seen);
}

// The tensors of `list` (params_ or buffers_) in this module and, with recurse, its subtree, in
// registration order, each once (a tied weight or shared buffer under its first name).
void Module::collect(NamedTensors Module::*list, const std::string& prefix, NamedTensors& out,
                     std::vector<const TensorImpl*>& seen, bool recurse) const {
  for (const auto& [local, t] : this->*list) {
    if (std::find(seen.begin(), seen.end(), t.impl()) != seen.end()) continue;
    seen.push_back(t.impl());
    out.emplace_back(prefix + local, t);
  }
  if (!recurse) return;
  for (const auto& [name, child] : children_) child->collect(list, prefix + name + ".", out, seen, true);
}

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors out;
  std::vector<const TensorImpl*> seen;
  collect(&Module::params_, "", out, seen, recurse);
  return out;
}

TensorList Module::parameters(bool recurse) const {
  TensorList out;
  for (auto& [n, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  std::vector<const TensorImpl*> seen;
  collect(&Module::buffers_, "", out, seen, recurse);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules(bool include_self) const {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  if (include_self) {
    // shared_from_this() needs an owner: a module on the stack threw std::bad_weak_ptr here.
    std::shared_ptr<const Module> self = weak_from_this().lock();
    ZDL_CHECK(self != nullptr, type_name_, ": named_modules(include_self) needs the module to be owned by a "
              "std::shared_ptr (std::make_shared<", type_name_, ">(...)), not a local or member object");
    out.emplace_back("", std::const_pointer_cast<Module>(self));
  }
  for (const auto& [name, child] : children_) {
    out.emplace_back(name, child);
    for (auto& [n, m] : child->named_modules(false)) out.emplace_back(name + "." + n, m);
  }
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

NamedTensors Module::state_dict() const {
  NamedTensors out = named_parameters();
  for (auto& kv : named_buffers()) out.push_back(kv);
  return out;
}

void Module::load_state_dict(const std::map<std::string, Tensor>& state, bool strict) {
  NamedTensors mine = state_dict();
  std::vector<std::string> missing, unexpected, mis_shaped;
  std::set<std::string> known;
  for (auto& [name, t] : mine) {
    known.insert(name);
    auto it = state.find(name);
    if (it == state.end()) {
      missing.push_back(name);
    } else if (!it->second.defined() || it->second.shape() != t.shape()) {
      mis_shaped.push_back(name + " (expected " + shape_str(t.shape()) + ", got " +
                           (it->second.defined() ? shape_str(it->second.shape()) : std::string("undefined")) + ")");
    }
  }
  for (auto& [name, t] : state)
    if (!known.count(name)) unexpected.push_back(name);
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
    return s;
  };
  bool bad = !mis_shaped.empty() || (strict && (!missing.empty() || !unexpected.empty()));
  ZDL_CHECK(!bad, type_name_, ".load_state_dict: ", missing.empty() ? "" : "missing: " + join(missing) + "; ",
            unexpected.empty() || !strict ? "" : "unexpected: " + join(unexpected) + "; ",
            mis_shaped.empty() ? "" : "wrong shape: " + join(mis_shaped) + "; ", "nothing was loaded");
  NoGradGuard ng;
  for (auto& [name, t] : mine) {
    auto it = state.find(name);
    if (it != state.end()) t.copy_(it->second);
  }
}

void Module::zero_grad() {
  for (auto& [name, t] : named_parameters()) t.set_grad(Tensor());
}

Tensor Module::forward(const Tensor& x) {
  ZDL_CHECK(false, type_name_, " has no single-tensor forward; call its own forward signature");
  return x;
}

Tensor Module::operator()(const Tensor& x) {
  return call({x}, [this](const TensorList& in) { return TensorList{forward(in[0])}; })[0];
}

// The hooks of one module, each list in registration order with the id its handle removes.
struct HookHandle::Table {
  template <class F>
  using List = std::vector<std::pair<uint64_t, F>>;
  List<Module::ForwardPreHook> fwd_pre;
  List<Module::ForwardPostHook> fwd_post;
  List<Module::BackwardHook> bwd_pre;
  List<Module::BackwardHook> post_bwd;
  uint64_t next_id = 1;

  template <class F>
  HookHandle add(const std::shared_ptr<Table>& self, List<F>& list, F f) {
    list.emplace_back(next_id, std::move(f));
    return HookHandle(self, next_id++);
  }
};

void HookHandle::remove() {
  auto t = table_.lock();
  if (!t) return;
  auto drop = [&](auto& list) {
    std::erase_if(list, [&](const auto& entry) { return entry.first == id_; });
  };
  drop(t->fwd_pre);
  drop(t->fwd_post);
  drop(t->bwd_pre);
  drop(t->post_bwd);
  table_.reset();
}

namespace {
template <class List, class... Args>
void run_hooks(const List& list, Args&&... args) {
  for (auto& [id, hook] : list) hook(args...);
}
}  // namespace

bool Module::has_hooks() const {
  return hooks_ && !(hooks_->fwd_pre.empty() && hooks_->fwd_post.empty() && hooks_->bwd_pre.empty() &&
                     hooks_->post_bwd.empty());
}

HookHandle::Table& Module::hook_table() {
  if (!hooks_) hooks_ = std::make_shared<HookHandle::Table>();
  return *hooks_;
}

HookHandle Module::register_forward_pre_hook(ForwardPreHook h) {
  return hook_table().add(hooks_, hooks_->fwd_pre, std::move(h));
}

HookHandle Module::register_forward_post_hook(ForwardPostHook h) {
  return hook_table().add(hooks_, hooks_->fwd_post, std::move(h));
}

HookHandle Module::register_backward_pre_hook(BackwardHook h) {
  return hook_table().add(hooks_, hooks_->bwd_pre, std::move(h));
}

HookHandle Module::register_post_backward_hook(BackwardHook h) {
  HookHandle handle = hook_table().add(hooks_, hooks_->post_bwd, std::move(h));
  if (post_state_) return handle;
  post_state_ = std::make_shared<PostBackwardState>();
  std::weak_ptr<PostBackwardState> weak = post_state_;
  for (auto& [name, p] : named_parameters()) {
    if (!p.requires_grad()) continue;
    ++post_state_->expected;
    p.register_post_accumulate_grad_hook([this, weak](Tensor&) {
      auto st = weak.lock();
      const uint64_t pass = autograd::backward_pass();
      if (!st || pass == 0 || st->armed_pass != pass) return;
      if (--st->remaining == 0 && st->fire(pass)) run_hooks(hooks_->post_bwd, *this);
    });
  }
  return handle;
}

bool Module::arm_post_backward(uint64_t pass) {
  if (!post_state_ || post_state_->armed_pass == pass || post_state_->fired_pass == pass) return false;
  post_state_->armed_pass = pass;
  post_state_->remaining = post_state_->expected;
  return true;
}

TensorList Module::call(const TensorList& inputs, const std::function<TensorList(const TensorList&)>& body) {
  if (hooks_) run_hooks(hooks_->fwd_pre, *this, inputs);
  TensorList outputs = checkpoint_activations_ && grad_enabled() ? checkpointed_forward(*this, inputs, body) : body(inputs);
  if (hooks_) run_hooks(hooks_->fwd_post, *this, inputs, outputs);
  if (!grad_enabled() || !hooks_ || (hooks_->bwd_pre.empty() && hooks_->post_bwd.empty())) return outputs;
  // In each backward pass, the first gradient to reach any output of this call fires the backward
  // pre-hooks and arms the post-backward hooks (once per pass), queueing the end-of-pass check
  // that fires them for parameters that got no gradient. Per pass, not per forward: two
  // forwards then two backwards, or a retained graph run twice, fire the hooks in each pass.
  auto fired = std::make_shared<uint64_t>(0);  // the last pass that reached this call's outputs
  std::weak_ptr<PostBackwardState> weak = post_state_;
  for (const Tensor& out : outputs) {
    if (!out.defined() || !out.requires_grad()) continue;
    out.register_hook([this, fired, weak](const Tensor&) {
      const uint64_t pass = autograd::backward_pass();
      if (*fired == pass) return Tensor();
      *fired = pass;
      run_hooks(hooks_->bwd_pre, *this);
      if (arm_post_backward(pass))
        autograd::queue_callback([this, weak, pass] {
          auto s = weak.lock();
          if (s && s->fire(pass)) run_hooks(hooks_->post_bwd, *this);
        });
      return Tensor();
    });
  }
  return outputs;
}

void Module::to_string_impl(std::string& out, const std::string& name, int depth) const {
  std::string indent(static_cast<size_t>(depth) * 2, ' ');
  out += indent + (name.empty() ? "" : "(" + name + "): ") + type_name_ + "(" + extra_repr() + ")";
  int64_t total = 0;
  for (auto& [n, t] : named_parameters()) total += t.numel();
  if (children_.empty()) {
    for (auto& [n, t] : params_) out += " " + n + shape_str(t.shape());
    out += "\n";
    return;
  }
  out += detail::str("  [", total, " params]\n");
  for (auto& [n, t] : params_) out += indent + "  " + n + shape_str(t.shape()) + "\n";
  for (auto& [n, child] : children_) child->to_string_impl(out, n, depth + 1);
}

std::string Module::to_string() const {
  std::string out;
  to_string_impl(out, "", 0);
  return out;
}

}  // namespace zdl::nn

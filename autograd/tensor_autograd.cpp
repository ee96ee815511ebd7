// The autograd methods of Tensor (declared in core/tensor.h, implemented here so that core/
// does not depend on the engine).
#include "autograd/engine.h"
#include "autograd/node.h"
#include "autograd/ops.h"

namespace zdl {

bool Tensor::requires_grad() const {
  AutogradMeta* m = autograd_meta_if();
  return m && m->requires_grad;
}

Tensor& Tensor::set_requires_grad(bool r) {
  AutogradMeta& m = autograd_meta();
  ZDL_CHECK(r || !m.grad_fn, "set_requires_grad(false) on a non-leaf tensor (shape=", shape_str(shape()),
            "); use detach() instead");
  if (r) ZDL_CHECK(is_floating(dtype()), "only floating-point tensors can require grad, got ", dtype_name(dtype()));
  m.requires_grad = r;
  return *this;
}

bool Tensor::is_leaf() const {
  AutogradMeta* m = autograd_meta_if();
  return !m || !m->grad_fn;
}

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<autograd::Node> none;
  AutogradMeta* m = autograd_meta_if();
  return m ? m->grad_fn : none;
}

Tensor Tensor::grad() const {
  AutogradMeta* m = autograd_meta_if();
  return m && m->grad ? Tensor(m->grad) : Tensor();
}

void Tensor::set_grad(const Tensor& g) const {
  if (g.defined()) {
    ZDL_CHECK(g.shape() == shape(), "set_grad: gradient shape=", shape_str(g.shape()), " != tensor shape=",
              shape_str(shape()), label_suffix());
    ZDL_CHECK(g.dtype() == dtype(), "set_grad: gradient dtype ", dtype_name(g.dtype()), " != tensor dtype ",
              dtype_name(dtype()), label_suffix());
  }
  autograd_meta().grad = g.defined() ? g.impl_ptr() : nullptr;
}

void Tensor::retain_grad() const {
  AutogradMeta& m = autograd_meta();
  if (!m.grad_fn || m.retains_grad) return;
  m.retains_grad = true;
  std::weak_ptr<TensorImpl> weak = impl_ptr();
  m.grad_fn->pre_hooks.resize(m.grad_fn->num_outputs);
  m.grad_fn->pre_hooks[m.output_nr].push_back([weak](const Tensor& g) {
    if (auto impl = weak.lock()) {
      AutogradMeta& meta = Tensor(impl).autograd_meta();
      // Accumulates over passes, as a leaf's gradient does (until set_grad(Tensor()) clears it).
      if (meta.grad) add_(Tensor(meta.grad), g);
      else meta.grad = g.contiguous_copy().impl_ptr();
    }
    return Tensor();
  });
}

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  autograd::backward({*this}, {grad}, retain_graph);
}

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = storage();
  impl->shape = shape();
  impl->strides = strides();
  impl->offset = offset();
  impl->dtype = dtype();
  impl->name = name();
  return Tensor(std::move(impl));
}

void Tensor::register_hook(std::function<Tensor(const Tensor&)> hook) const {
  ZDL_CHECK(requires_grad(), "register_hook on a tensor that does not require grad (shape=", shape_str(shape()), ")",
            label_suffix());
  AutogradMeta& m = autograd_meta();
  if (!m.grad_fn) {
    m.leaf_hooks.push_back(std::move(hook));
    return;
  }
  m.grad_fn->pre_hooks.resize(m.grad_fn->num_outputs);
  m.grad_fn->pre_hooks[m.output_nr].push_back(std::move(hook));
}

void Tensor::register_post_accumulate_grad_hook(std::function<void(Tensor&)> hook) const {
  ZDL_CHECK(is_leaf() && requires_grad(), "post-accumulate-grad hooks need a leaf that requires grad",
            label_suffix());
  autograd_meta().post_accumulate_hooks.push_back(std::move(hook));
}

}  // namespace zdl

// Tensor: a view (shape, strides, offset, dtype) on a shared Storage (docs/design.md, mechanism 1).
//
// A Tensor is a cheap handle (shared_ptr to TensorImpl). Views share the Storage; data is
// reached only through storage->data() when an op runs, so a released storage is caught.
// Autograd state (requires_grad, grad, grad_fn, hooks) hangs off the impl; the engine and
// the differentiable ops live in autograd/, which implements the methods marked [autograd].
//
//   Tensor x = Tensor::randn({4, 8}, /*seed=*/1);
//   Tensor w = Tensor::zeros({8, 3}).set_requires_grad(true);
//   Tensor y = zdl::matmul(x, w);            // autograd/ops.h
//   zdl::sum(y).backward();  w.grad();       // [8, 3]
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/storage.h"

namespace zdl {

using Shape = std::vector<int64_t>;

namespace autograd {
struct Node;
}

class Tensor;

// Per-tensor autograd state. Plain data here; the engine in autograd/ gives it meaning.
struct AutogradMeta {
  bool requires_grad = false;
  std::shared_ptr<autograd::Node> grad_fn;   // null for leaves
  uint32_t output_nr = 0;                    // which output of grad_fn this tensor is
  std::weak_ptr<autograd::Node> grad_accumulator;  // leaves: the node that accumulates .grad
  std::shared_ptr<struct TensorImpl> grad;   // accumulated gradient (leaves, or retain_grad)
  bool retains_grad = false;
  // Leaves: hooks on the incoming gradient, run before it is accumulated.
  std::vector<std::function<Tensor(const Tensor&)>> leaf_hooks;
  // Leaves: hooks run after the gradient of one backward pass is fully accumulated.
  std::vector<std::function<void(Tensor&)>> post_accumulate_hooks;
};

struct TensorImpl {
  Storage storage;
  Shape shape;
  Shape strides;  // in elements
  int64_t offset = 0;  // in elements
  DType dtype = DType::F32;
  std::unique_ptr<AutogradMeta> autograd;
  std::string name;
};

int64_t numel_of(const Shape& shape);
Shape contiguous_strides(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- factories (bytes tagged with the current MemoryScope category) ----
  static Tensor empty(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor ones(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor scalar(double value, DType dtype = DType::F32, Device device = Device::cpu());
  // Copies values (converted to dtype) into a new CPU tensor; sizes must match.
  static Tensor from_vector(const std::vector<double>& values, const Shape& shape, DType dtype = DType::F32);
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape, DType dtype = DType::F32);
  static Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape, DType dtype);
  static Tensor arange(int64_t n, DType dtype = DType::F32, Device device = Device::cpu());
  // Counter-based random tensors: element i depends only on (seed, stream, i).
  static Tensor randn(const Shape& shape, uint64_t seed, DType dtype = DType::F32, Device device = Device::cpu(),
                      uint64_t stream = 0, double mean = 0.0, double stddev = 1.0);
  static Tensor rand(const Shape& shape, uint64_t seed, DType dtype = DType::F32, Device device = Device::cpu(),
                     uint64_t stream = 0, double low = 0.0, double high = 1.0);
  // A view on an existing storage (no copy).
  static Tensor from_storage(Storage storage, const Shape& shape, const Shape& strides, int64_t offset, DType dtype);

  // ---- metadata ----
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return checked()->shape; }
  const Shape& strides() const { return checked()->strides; }
  int64_t offset() const { return checked()->offset; }
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  // Size of dimension d; negative d counts from the end.
  int64_t size(int64_t d) const;
  int64_t numel() const { return numel_of(shape()); }
  DType dtype() const { return checked()->dtype; }
  Device device() const { return checked()->storage->device(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(dtype()); }
  bool is_contiguous() const;
  // Throws unless every element has a place of its own (no stride 0 over a size > 1, as in an
  // expanded view): an in-place write into it would write one element several times.
  void check_writable_in_place(const char* op) const;
  const Storage& storage() const { return checked()->storage; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& o) const { return impl_ == o.impl_; }
  // Wraps a negative dimension index and checks the range.
  int64_t wrap_dim(int64_t d) const;

  // A name for error messages (parameters carry theirs).
  const std::string& name() const { return checked()->name; }
  Tensor& set_name(std::string n);

  // ---- data access (CPU) ----
  // Pointer to element 0 of this view; checks the dtype. Reads storage->data() now.
  template <class T>
  T* data() const {
    ZDL_CHECK(dtype_of<T>::value == dtype(), "data<", dtype_name(dtype_of<T>::value), ">() on a tensor of dtype ",
              dtype_name(dtype()), label_suffix());
    return static_cast<T*>(raw_data());
  }
  void* raw_data() const;
  // Element values as doubles (copies from device if needed; any layout).
  std::vector<double> to_vector() const;
  std::vector<float> to_float_vector() const;
  std::vector<int64_t> to_int_vector() const;
  // Value of a one-element tensor.
  double item() const;

  // ---- copies and conversions (not differentiable; see autograd/ops.h for those) ----
  Tensor contiguous_copy() const;  // always a fresh contiguous tensor
  Tensor to(Device device) const;  // same object when already there
  Tensor to(DType dtype) const;    // same object when already that dtype
  // Copies src's values into this tensor (shapes must match; converts dtype and device).
  void copy_(const Tensor& src) const;
  void fill_(double value) const;
  void zero_() const { fill_(0.0); }

  // ---- autograd [autograd] ----
  bool requires_grad() const;
  Tensor& set_requires_grad(bool r = true);
  bool is_leaf() const;
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  // Accumulated gradient (undefined tensor if none).
  Tensor grad() const;
  void set_grad(const Tensor& g) const;
  // Keeps the gradient of a non-leaf in grad(), accumulated over backward passes as a leaf's is.
  void retain_grad() const;
  // Runs backward from this tensor; grad defaults to 1 for a one-element tensor.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;
  // A tensor sharing storage but cut from the graph.
  Tensor detach() const;
  // Hook on the gradient flowing into this tensor; may return a replacement (or undefined to keep).
  void register_hook(std::function<Tensor(const Tensor&)> hook) const;
  // Leaves only: runs after this backward's gradient is fully accumulated into .grad.
  void register_post_accumulate_grad_hook(std::function<void(Tensor&)> hook) const;
  AutogradMeta& autograd_meta() const;  // creates it on first use
  AutogradMeta* autograd_meta_if() const { return impl_ ? impl_->autograd.get() : nullptr; }

  std::string to_string(int64_t max_elems = 8) const;

 private:
  TensorImpl* checked() const {
    ZDL_CHECK(impl_ != nullptr, "use of an undefined Tensor");
    return impl_.get();
  }
  std::string label_suffix() const;
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Standard checks with both values in the message.
void check_same_device(const Tensor& a, const Tensor& b, const char* op);
void check_same_dtype(const Tensor& a, const Tensor& b, const char* op);
void check_defined(const Tensor& a, const char* op, const char* arg);

}  // namespace zdl

// Views and layout ops. A view shares its input's Storage (new strides/offset, no copy);
// backward maps the gradient back to the input's shape (inverse permutation, scatter of a
// slice into zeros, reshape back).
#include <numeric>
#include <optional>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/ops/op_checks.h"

namespace zdl {

using autograd::TensorList;
using namespace ops_detail;

namespace {

Tensor make_view(const Tensor& a, const Shape& shape, const Shape& strides, int64_t offset) {
  return Tensor::from_storage(a.storage(), shape, strides, offset, a.dtype());
}

Shape infer_shape(const char* op, const Tensor& a, const Shape& shape) {
  Shape out = shape;
  int64_t known = 1, infer = -1;
  bool overflow = false;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      ZDL_CHECK(infer < 0, op, ": more than one -1 in shape=", shape_str(shape));
      infer = static_cast<int64_t>(i);
    } else {
      ZDL_CHECK(out[i] >= 0, op, ": negative size in shape=", shape_str(shape));
      overflow = overflow || __builtin_mul_overflow(known, out[i], &known);
    }
  }
  ZDL_CHECK(!overflow, op, ": shape=", shape_str(shape), " has more elements than 64 bits count (tensor shape=",
            shape_str(a.shape()), ")");
  if (infer >= 0) {
    ZDL_CHECK(known > 0 && a.numel() % known == 0, op, ": cannot make shape=", shape_str(a.shape()), " (", a.numel(),
              " elements) into ", shape_str(shape));
    out[infer] = a.numel() / known;
  }
  ZDL_CHECK(numel_of(out) == a.numel(), op, ": cannot make shape=", shape_str(a.shape()), " (", a.numel(),
            " elements) into ", shape_str(shape), " (", numel_of(out), " elements)");
  return out;
}

// The strides that show `a`'s elements in `shape` without moving them, or nothing when its
// layout does not allow it (then reshape copies). `a`'s dimensions fall into runs that are laid
// out as one block (stride[d - 1] == size[d] x stride[d]; size-1 dimensions join any run); the new
// dimensions are carved out of those runs from the innermost out, and each must end exactly where
// a run ends.
std::optional<Shape> view_strides(const Tensor& a, const Shape& shape) {
  const Shape &old = a.shape(), &old_strides = a.strides();
  if (a.numel() <= 1 || old.empty()) return contiguous_strides(shape);
  Shape out(shape.size());
  int64_t nd = static_cast<int64_t>(shape.size()) - 1;  // the next new dimension to place
  int64_t run_base = old_strides.back(), run_numel = 1, placed = 1;
  for (int64_t d = static_cast<int64_t>(old.size()) - 1; d >= 0; --d) {
    run_numel *= old[d];
    const bool run_ends = d == 0 || (old[d - 1] != 1 && old_strides[d - 1] != run_numel * run_base);
    if (!run_ends) continue;
    for (; nd >= 0 && (placed < run_numel || shape[nd] == 1); --nd) {
      out[nd] = placed * run_base;
      placed *= shape[nd];
    }
    if (placed != run_numel) return std::nullopt;
    if (d > 0) {
      run_base = old_strides[d - 1];
      run_numel = placed = 1;
    }
  }
  if (nd >= 0) return std::nullopt;
  return out;
}

Tensor reshape_backward_fn(const Tensor& a, Tensor out) {
  return autograd::record("reshape", {a}, out, [in_shape = a.shape()](const TensorList& g) {
    return TensorList{reshape(g[0], in_shape)};
  });
}

}  // namespace

Tensor view(const Tensor& a, const Shape& shape) {
  check_defined(a, "view", "a");
  Shape s = infer_shape("view", a, shape);
  std::optional<Shape> strides = view_strides(a, s);
  ZDL_CHECK(strides.has_value(), "view: tensor of shape=", shape_str(a.shape()), " strides=", shape_str(a.strides()),
            " cannot be seen as shape=", shape_str(s), " without a copy; use reshape() (which copies then) or ",
            "contiguous() first");
  return reshape_backward_fn(a, make_view(a, s, *strides, a.offset()));
}

// A view wherever the strides allow (the q/k/v split of a fused projection stays in place), a copy
// otherwise.
Tensor reshape(const Tensor& a, const Shape& shape) {
  check_defined(a, "reshape", "a");
  Shape s = infer_shape("reshape", a, shape);
  if (std::optional<Shape> strides = view_strides(a, s)) return reshape_backward_fn(a, make_view(a, s, *strides, a.offset()));
  return view(contiguous(a), s);
}

Tensor contiguous(const Tensor& a) {
  check_defined(a, "contiguous", "a");
  if (a.is_contiguous()) return a;
  Tensor out = a.contiguous_copy();
  return autograd::record("contiguous", {a}, out, [](const TensorList& g) { return TensorList{g[0]}; });
}

Tensor permute(const Tensor& a, const std::vector<int64_t>& dims) {
  check_defined(a, "permute", "a");
  ZDL_CHECK(static_cast<int64_t>(dims.size()) == a.dim(), "permute: ", dims.size(), " dims given for a ", a.dim(),
            "-d tensor of shape=", shape_str(a.shape()));
  std::vector<int64_t> perm(dims.size()), inverse(dims.size());
  std::vector<bool> used(dims.size(), false);
  Shape shape(dims.size()), strides(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = a.wrap_dim(dims[i]);
    ZDL_CHECK(!used[d], "permute: dimension ", d, " repeated in ", shape_str(dims));
    used[d] = true;
    perm[i] = d;
    inverse[d] = static_cast<int64_t>(i);
    shape[i] = a.shape()[d];
    strides[i] = a.strides()[d];
  }
  Tensor out = make_view(a, shape, strides, a.offset());
  return autograd::record("permute", {a}, out, [inverse](const TensorList& g) {
    return TensorList{permute(g[0], inverse)};
  });
}

Tensor transpose(const Tensor& a, int64_t d0, int64_t d1) {
  check_defined(a, "transpose", "a");
  std::vector<int64_t> perm(static_cast<size_t>(a.dim()));
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[a.wrap_dim(d0)], perm[a.wrap_dim(d1)]);
  return permute(a, perm);
}

Tensor unsqueeze(const Tensor& a, int64_t d) {
  check_defined(a, "unsqueeze", "a");
  int64_t n = a.dim() + 1;
  int64_t w = d < 0 ? d + n : d;
  ZDL_CHECK(w >= 0 && w < n, "unsqueeze: dimension ", d, " out of range for shape=", shape_str(a.shape()));
  Shape s = a.shape();
  s.insert(s.begin() + w, 1);
  return reshape(a, s);
}

Tensor squeeze(const Tensor& a, int64_t d) {
  check_defined(a, "squeeze", "a");
  int64_t w = a.wrap_dim(d);
  ZDL_CHECK(a.shape()[w] == 1, "squeeze: dimension ", d, " has size ", a.shape()[w], " (shape=",
            shape_str(a.shape()), ")");
  Shape s = a.shape();
  s.erase(s.begin() + w);
  return reshape(a, s);
}

Tensor expand(const Tensor& a, const Shape& shape) {
  check_defined(a, "expand", "a");
  ZDL_CHECK(static_cast<int64_t>(shape.size()) >= a.dim(), "expand: cannot expand shape=", shape_str(a.shape()),
            " to fewer dims ", shape_str(shape));
  int64_t lead = static_cast<int64_t>(shape.size()) - a.dim();
  // A negative size was refused deep inside as "Tensor::empty: negative size".
  for (int64_t s : shape)
    ZDL_CHECK(s >= 0, "expand: negative size in ", shape_str(shape), " (sizes are given in full; -1 does not keep one)");
  for (int64_t i = 0; i < a.dim(); ++i)
    ZDL_CHECK(a.shape()[i] == shape[lead + i] || a.shape()[i] == 1, "expand: cannot expand shape=",
              shape_str(a.shape()), " to ", shape_str(shape));
  Tensor out = make_view(a, shape, broadcast_strides(a, shape), a.offset());
  return autograd::record("expand", {a}, out, [in_shape = a.shape()](const TensorList& g) {
    return TensorList{sum_to(g[0], in_shape)};
  });
}

Tensor slice(const Tensor& a, int64_t dim, int64_t start, int64_t end, int64_t step) {
  check_defined(a, "slice", "a");
  int64_t d = a.wrap_dim(dim);
  int64_t n = a.shape()[d];
  ZDL_CHECK(step > 0, "slice: step must be positive, got ", step);
  if (start < 0) start += n;
  if (end < 0) end += n;
  end = std::min(end, n);
  ZDL_CHECK(start >= 0 && start <= end, "slice: range [", start, ", ", end, ") invalid for dimension ", d,
            " of size ", n, " (shape=", shape_str(a.shape()), ")");
  Shape shape = a.shape(), strides = a.strides();
  shape[d] = end == start ? 0 : (end - start - 1) / step + 1;  // (end - start + step - 1) overflowed for a huge step
  // One element or none: the stride is never used (a huge step would overflow it).
  if (shape[d] > 1) ZDL_CHECK(!__builtin_mul_overflow(strides[d], step, &strides[d]), "slice: step ", step, " too large");
  Tensor out = make_view(a, shape, strides, a.offset() + start * a.strides()[d]);
  return autograd::record("slice", {a}, out, [in_shape = a.shape(), d, start, end, step](const TensorList& g) {
    Tensor gi = Tensor::zeros(in_shape, g[0].dtype(), g[0].device());
    slice(gi, d, start, end, step).copy_(g[0]);
    return TensorList{gi};
  });
}

namespace {
// The tensor of `shape` (contiguous strides) whose slices along d the parts are, when they are
// exactly that: one storage, those strides, consecutive offsets. A backward that writes several
// gradients into one buffer (cuDNN's attention writes dq, dk, dv into one [B, T, 3C] buffer)
// then hands split's backward its input's gradient as it is.
std::optional<Tensor> adjacent_parts(const TensorList& parts, const Shape& shape, int64_t d) {
  const Tensor& first = parts.front();
  const Shape strides = contiguous_strides(shape);
  int64_t at = first.offset();
  for (const Tensor& p : parts) {
    if (!(p.storage() == first.storage()) || p.dtype() != first.dtype() || p.offset() != at ||
        (p.numel() > 0 && p.strides() != strides))
      return std::nullopt;
    at += p.shape()[d] * strides[d];
  }
  return Tensor::from_storage(first.storage(), shape, strides, first.offset(), first.dtype());
}
}  // namespace

std::vector<Tensor> split(const Tensor& a, const std::vector<int64_t>& sizes, int64_t dim) {
  check_defined(a, "split", "a");
  int64_t d = a.wrap_dim(dim);
  int64_t total = 0;
  for (int64_t s : sizes) {
    ZDL_CHECK(s >= 0, "split: negative size in ", shape_str(sizes));
    total += s;
  }
  ZDL_CHECK(total == a.shape()[d], "split: sizes ", shape_str(sizes), " sum to ", total, " but dimension ", d,
            " has size ", a.shape()[d], " (shape=", shape_str(a.shape()), ")");
  std::vector<Tensor> out;
  int64_t at = 0;
  for (int64_t s : sizes) {
    Shape shape = a.shape();
    shape[d] = s;
    out.push_back(make_view(a, shape, a.strides(), a.offset() + at * a.strides()[d]));
    at += s;
  }
  // One node for all parts: the input's gradient is one buffer that each part's gradient is copied
  // into (zeros only where a part got none), not a zero-filled buffer per part summed afterwards;
  // no copy at all when the parts' gradients already lie side by side in one buffer.
  return autograd::record_multi("split", {a}, out, [in_shape = a.shape(), sizes, d](const TensorList& g) {
    const Tensor* any = nullptr;
    bool all = true;
    for (const Tensor& t : g) {
      if (t.defined() && !any) any = &t;
      all = all && t.defined();
    }
    if (!any) return TensorList{Tensor()};
    if (all) {
      if (std::optional<Tensor> whole = adjacent_parts(g, in_shape, d)) return TensorList{*whole};
    }
    Tensor gi = all ? Tensor::empty(in_shape, any->dtype(), any->device())
                    : Tensor::zeros(in_shape, any->dtype(), any->device());
    int64_t begin = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (g[i].defined() && sizes[i] > 0) slice(gi, d, begin, begin + sizes[i]).copy_(g[i]);
      begin += sizes[i];
    }
    return TensorList{gi};
  });
}

std::vector<Tensor> split(const Tensor& a, int64_t split_size, int64_t dim) {
  check_defined(a, "split", "a");
  ZDL_CHECK(split_size > 0, "split: split_size must be positive, got ", split_size);
  int64_t n = a.size(dim);
  std::vector<int64_t> sizes;
  for (int64_t at = 0; at < n; at += split_size) sizes.push_back(std::min(split_size, n - at));
  return split(a, sizes, dim);
}

Tensor cat(const std::vector<Tensor>& parts, int64_t dim) {
  ZDL_CHECK(!parts.empty(), "cat: no tensors given");
  for (size_t i = 0; i < parts.size(); ++i) check_defined(parts[i], "cat", "parts[i]");
  const Tensor& first = parts[0];
  int64_t d = first.wrap_dim(dim);
  Shape shape = first.shape();
  int64_t total = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Tensor& p = parts[i];
    check_same_device(first, p, "cat");
    check_same_dtype(first, p, "cat");
    ZDL_CHECK(p.dim() == first.dim(), "cat: tensor ", i, " has shape=", shape_str(p.shape()),
              ", tensor 0 has shape=", shape_str(first.shape()));
    for (int64_t k = 0; k < p.dim(); ++k)
      ZDL_CHECK(k == d || p.shape()[k] == shape[k], "cat: tensor ", i, " has shape=", shape_str(p.shape()),
                " but tensor 0 has shape=", shape_str(first.shape()), " (they may differ only in dimension ", d, ")");
    total += p.shape()[d];
  }
  shape[d] = total;
  Tensor out = Tensor::empty(shape, first.dtype(), first.device());
  std::vector<int64_t> sizes;
  int64_t at = 0;
  for (const Tensor& p : parts) {
    slice(out.detach(), d, at, at + p.shape()[d]).copy_(p);
    sizes.push_back(p.shape()[d]);
    at += p.shape()[d];
  }
  return autograd::record("cat", parts, out, [sizes, d](const TensorList& g) {
    std::vector<Tensor> pieces = split(g[0], sizes, d);
    return TensorList(pieces.begin(), pieces.end());
  });
}

}  // namespace zdl

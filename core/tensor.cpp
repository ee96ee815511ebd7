#include "core/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "core/device_copy.h"
#include "core/rng.h"
#include "core/strided_loop.h"
#include "kernels/cpu/parallel.h"
#ifdef ZDL_WITH_CUDA
// [Note: layering] core/ reaches the CUDA layout kernels through their plain C++ header (no CUDA
// includes); the kernels themselves depend only on core/dtype.h and core/strided_loop.h.
#include "kernels/cuda/copy.h"
#endif

namespace zdl {

int64_t numel_of(const Shape& shape) {
  // Checked: a shape whose product overflows (1<<62 x 3) gave a negative count, or a wrapped one
  // (1<<32 x 1<<32 gave 0) over a storage too small for it.
  int64_t n = 1;
  for (int64_t s : shape)
    ZDL_CHECK(!__builtin_mul_overflow(n, s, &n), "shape=", shape_str(shape), " has more elements than 64 bits count");
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape st(shape.size());
  int64_t s = 1;
  for (int64_t i = static_cast<int64_t>(shape.size()) - 1; i >= 0; --i) {
    st[i] = s;
    s *= shape[i];
  }
  return st;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t s : shape) ZDL_CHECK(s >= 0, "Tensor::empty: negative size in shape=", shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  size_t bytes = 0;
  ZDL_CHECK(!__builtin_mul_overflow(static_cast<size_t>(numel_of(shape)), element_size(dtype), &bytes), "shape=",
            shape_str(shape), " of ", dtype_name(dtype), " has more bytes than 64 bits count");
  impl->storage = std::make_shared<StorageImpl>(bytes, device, current_memory_category());
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::from_storage(Storage storage, const Shape& shape, const Shape& strides, int64_t offset, DType dtype) {
  ZDL_CHECK(shape.size() == strides.size(), "from_storage: shape ", shape_str(shape), " and strides ",
            shape_str(strides), " differ in rank");
  // Checked arithmetic: offset -1 read before the buffer, and a stride of 2^62 wrapped around
  // onto elements inside it.
  ZDL_CHECK(offset >= 0, "from_storage: negative offset ", offset);
  int64_t max_off = offset;
  for (size_t i = 0; i < shape.size(); ++i) {
    ZDL_CHECK(shape[i] >= 0 && strides[i] >= 0, "from_storage: negative size or stride in shape=", shape_str(shape),
              " strides=", shape_str(strides));
    int64_t span = 0;
    ZDL_CHECK(shape[i] == 0 || (!__builtin_mul_overflow(shape[i] - 1, strides[i], &span) &&
                                !__builtin_add_overflow(max_off, span, &max_off)),
              "from_storage: view shape=", shape_str(shape), " strides=", shape_str(strides), " offset=", offset,
              " reaches past 64 bits");
  }
  size_t reach = 0;
  ZDL_CHECK(numel_of(shape) == 0 ||
                (!__builtin_mul_overflow(static_cast<size_t>(max_off) + 1, element_size(dtype), &reach) &&
                 reach <= storage->nbytes()),
            "from_storage: view shape=", shape_str(shape), " offset=", offset, " exceeds storage of ",
            storage->nbytes(), " bytes");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (t.nbytes()) zero_bytes(t.raw_data(), device, t.nbytes());
  return t;
}

Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}

Tensor Tensor::scalar(double value, DType dtype, Device device) { return full({}, value, dtype, device); }

namespace {

// Stores a double into element i of a contiguous buffer of dtype t.
// An integer element takes a value it can hold: NaN or 1e30 into an int64 was an undefined
// conversion (it gave INT64_MIN).
inline void check_fits_integer(DType t, double v) {
  const double bound = t == DType::I32 ? 2147483648.0 : 9223372036854775808.0;  // 2^31, 2^63
  ZDL_CHECK(v >= -bound && v < bound, "the value ", v, " does not fit in ", dtype_name(t));
}

inline void store_as(void* base, DType t, int64_t i, double v) {
  if (t == DType::I32 || t == DType::I64) check_fits_integer(t, v);
  switch (t) {
    case DType::F32: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case DType::F64: static_cast<double*>(base)[i] = v; break;
    case DType::BF16: static_cast<BFloat16*>(base)[i] = BFloat16(static_cast<float>(v)); break;
    case DType::F16: static_cast<Half*>(base)[i] = Half(static_cast<float>(v)); break;
    case DType::I32: static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v); break;
    case DType::I64: static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v); break;
  }
}

inline double load_as_double(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(base)[i];
    case DType::F64: return static_cast<const double*>(base)[i];
    case DType::BF16: return static_cast<float>(static_cast<const BFloat16*>(base)[i]);
    case DType::F16: return static_cast<float>(static_cast<const Half*>(base)[i]);
    case DType::I32: return static_cast<const int32_t*>(base)[i];
    case DType::I64: return static_cast<double>(static_cast<const int64_t*>(base)[i]);
  }
  return 0;
}

template <class W>
void strided_copy_words(const StridedRows<2>& it, W* dst, const W* src) {
  const auto is = it.inner_strides();
  kernels::cpu::parallel_rows(it.rows(), it.inner(), [&](int64_t r, int64_t lo, int64_t hi) {
    auto off = it.row_offsets(r);
    W* d = dst + off[0];
    const W* s = src + off[1];
    if (is[0] == 1 && is[1] == 1) {
      std::memcpy(d + lo, s + lo, static_cast<size_t>(hi - lo) * sizeof(W));
    } else if (is[0] == 1 && is[1] == 0) {  // a fill
      std::fill(d + lo, d + hi, s[0]);
    } else {
      for (int64_t i = lo; i < hi; ++i) d[i * is[0]] = s[i * is[1]];
    }
  });
}

template <class D, class S>
void strided_convert(const StridedRows<2>& it, D* dst, const S* src) {
  const auto is = it.inner_strides();
  kernels::cpu::parallel_rows(it.rows(), it.inner(), [&](int64_t r, int64_t lo, int64_t hi) {
    auto off = it.row_offsets(r);
    D* d = dst + off[0];
    const S* s = src + off[1];
    if (is[0] == 1 && is[1] == 1) {
      // Unit strides spelled out: the general loop below compiles to gathers and scatters,
      // far slower for contiguous rows (nearly every mixed-precision cast).
      for (int64_t i = lo; i < hi; ++i) d[i] = static_cast<D>(static_cast<float>(s[i]));
    } else {
      for (int64_t i = lo; i < hi; ++i) d[i * is[0]] = static_cast<D>(static_cast<float>(s[i * is[1]]));
    }
  });
}

// Copies a CPU view into another CPU view of the same shape, converting the dtype.
void cpu_copy(const Tensor& dst, const Tensor& src) {
  StridedRows<2> it;
  it.shape = dst.shape();
  it.strides = {dst.strides(), src.strides()};
  it = coalesce(it);
  void* d = dst.raw_data();
  const void* s = src.raw_data();
  if (dst.dtype() == src.dtype()) {
    switch (element_size(dst.dtype())) {
      case 2: return strided_copy_words(it, static_cast<uint16_t*>(d), static_cast<const uint16_t*>(s));
      case 4: return strided_copy_words(it, static_cast<uint32_t*>(d), static_cast<const uint32_t*>(s));
      case 8: return strided_copy_words(it, static_cast<uint64_t*>(d), static_cast<const uint64_t*>(s));
    }
  }
  // Fast paths for the mixed-precision casts; everything else goes through double.
  if (dst.dtype() == DType::BF16 && src.dtype() == DType::F32)
    return strided_convert(it, static_cast<BFloat16*>(d), static_cast<const float*>(s));
  if (dst.dtype() == DType::F32 && src.dtype() == DType::BF16)
    return strided_convert(it, static_cast<float*>(d), static_cast<const BFloat16*>(s));
  int64_t rows = it.rows(), inner = it.inner();
  auto is = it.inner_strides();
  for (int64_t r = 0; r < rows; ++r) {
    auto off = it.row_offsets(r);
    for (int64_t i = 0; i < inner; ++i)
      store_as(d, dst.dtype(), off[0] + i * is[0], load_as_double(s, src.dtype(), off[1] + i * is[1]));
  }
}

}  // namespace

Tensor Tensor::from_vector(const std::vector<double>& values, const Shape& shape, DType dtype) {
  ZDL_CHECK(static_cast<int64_t>(values.size()) == numel_of(shape), "from_vector: ", values.size(),
            " values for shape=", shape_str(shape), " (", numel_of(shape), " elements)");
  Tensor t = empty(shape, dtype);
  void* p = t.raw_data();
  for (size_t i = 0; i < values.size(); ++i) store_as(p, dtype, static_cast<int64_t>(i), values[i]);
  return t;
}

Tensor Tensor::from_vector(const std::vector<float>& values, const Shape& shape, DType dtype) {
  return from_vector(std::vector<double>(values.begin(), values.end()), shape, dtype);
}

Tensor Tensor::from_vector(const std::vector<int64_t>& values, const Shape& shape, DType dtype) {
  ZDL_CHECK(static_cast<int64_t>(values.size()) == numel_of(shape), "from_vector: ", values.size(),
            " values for shape=", shape_str(shape));
  Tensor t = empty(shape, dtype);
  void* p = t.raw_data();
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::I64) static_cast<int64_t*>(p)[i] = values[i];
    else store_as(p, dtype, static_cast<int64_t>(i), static_cast<double>(values[i]));
  }
  return t;
}

Tensor Tensor::arange(int64_t n, DType dtype, Device device) {
  Tensor t = empty({n}, dtype);
  for (int64_t i = 0; i < n; ++i) store_as(t.raw_data(), dtype, i, static_cast<double>(i));
  return t.to(device);
}

Tensor Tensor::randn(const Shape& shape, uint64_t seed, DType dtype, Device device, uint64_t stream, double mean,
                     double stddev) {
  ZDL_CHECK(is_floating(dtype), "randn: normal draws need a floating dtype, got ", dtype_name(dtype),
            " (draw in f32 and convert to round them)");
  ZDL_CHECK(std::isfinite(mean) && std::isfinite(stddev) && stddev >= 0, "randn: mean ", mean, " and stddev ", stddev,
            " must be finite, stddev >= 0");
  Tensor t = empty(shape, dtype);
  Philox gen(seed, stream);
  void* p = t.raw_data();
  int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) store_as(p, dtype, i, mean + stddev * gen.normal(static_cast<uint64_t>(i)));
  return t.to(device);
}

Tensor Tensor::rand(const Shape& shape, uint64_t seed, DType dtype, Device device, uint64_t stream, double low,
                    double high) {
  ZDL_CHECK(std::isfinite(low) && std::isfinite(high) && low <= high, "rand: the range [", low, ", ", high,
            ") must be finite with low <= high");
  Tensor t = empty(shape, dtype);
  Philox gen(seed, stream);
  void* p = t.raw_data();
  int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) store_as(p, dtype, i, low + (high - low) * gen.uniform(static_cast<uint64_t>(i)));
  return t.to(device);
}

int64_t Tensor::wrap_dim(int64_t d) const {
  int64_t n = dim();
  int64_t w = d < 0 ? d + n : d;
  // A 0-d tensor has no dimension to name (dimension 0 of it used to read past its empty shape).
  ZDL_CHECK(w >= 0 && w < n, "dimension ", d, " out of range for a ", n, "-d tensor of shape=", shape_str(shape()),
            label_suffix());
  return w;
}

int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim(d)]; }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  const Shape& sh = shape();
  const Shape& st = strides();
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (sh[i] == 1) continue;
    if (st[i] != expected) return false;
    expected *= sh[i];
  }
  return true;
}

Tensor& Tensor::set_name(std::string n) {
  checked()->name = n;
  if (storage()->label().empty()) storage()->set_label(n);
  return *this;
}

std::string Tensor::label_suffix() const {
  if (!impl_ || impl_->name.empty()) return "";
  return " ('" + impl_->name + "')";
}

void* Tensor::raw_data() const {
  const TensorImpl* t = checked();
  if (t->storage->is_released() && !t->name.empty()) {
    const std::string& hint = t->storage->release_hint();
    throw Error(detail::str("tensor '", t->name, "' (shape=", shape_str(t->shape), ") has no bytes: its storage",
                t->storage->label().empty() ? "" : " '" + t->storage->label() + "'", " is released",
                hint.empty() ? "" : "; " + hint));
  }
  char* base = static_cast<char*>(t->storage->data());
  return base + t->offset * static_cast<int64_t>(element_size(t->dtype));
}

Tensor Tensor::contiguous_copy() const {
  Tensor out = empty(shape(), dtype(), device());
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(Device d) const {
  if (device() == d) return *this;
  Tensor out = empty(shape(), dtype(), d);
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(DType t) const {
  if (dtype() == t) return *this;
  Tensor out = empty(shape(), t, device());
  out.copy_(*this);
  return out;
}

#ifdef ZDL_WITH_CUDA
namespace {

// Copies a view into another view of the same shape on the same CUDA device, converting the dtype
// (kernels/cuda/copy.h; the twin of cpu_copy).
void cuda_copy(const Tensor& dst, const Tensor& src) {
  StridedRows<2> it;
  it.shape = dst.shape();
  it.strides = {dst.strides(), src.strides()};
  kernels::cuda::strided_copy(coalesce(it), dst.dtype(), dst.raw_data(), src.dtype(), src.raw_data());
}

// A contiguous temporary on a device for a copy in flight, counted as Workspace.
Tensor copy_temp(const Shape& shape, DType dtype, Device device) {
  MemoryScope scope(MemoryCategory::Workspace);
  return Tensor::empty(shape, dtype, device);
}

// `src` itself when it is contiguous and of `dtype`, else a contiguous copy of it in `dtype` on its device.
Tensor packed_on_device(const Tensor& src, DType dtype) {
  if (src.is_contiguous() && src.dtype() == dtype) return src;
  Tensor packed = copy_temp(src.shape(), dtype, src.device());
  cuda_copy(packed, src);
  return packed;
}

}  // namespace
#endif

// [Note: copies across devices] Bytes move between devices only as contiguous runs of one
// dtype; layout and dtype changes happen on one side:
//  - same CUDA device: one strided kernel (layout and dtype at once);
//  - host -> device: layout and dtype on the host (cpu_copy into a contiguous staging tensor
//    of the destination's dtype), bytes over, then a device layout copy if the destination is
//    a strided view;
//  - device -> host: the source made contiguous on its device (same dtype, bit-exact), bytes
//    over, then layout and dtype on the host (cpu_copy), so conversions are the CPU's own;
//  - between CUDA devices: contiguous in the destination dtype on the source device, bytes over,
//    then a device layout copy if needed.
// Device-side temporaries are counted under Workspace, host staging under the current category.
void Tensor::check_writable_in_place(const char* op) const {
  for (int64_t d = 0; d < dim(); ++d)
    ZDL_CHECK(strides()[d] != 0 || shape()[d] <= 1, op, ": the destination of shape=", shape_str(shape()),
              " strides=", shape_str(strides()), " repeats elements (an expanded view); write into the tensor it "
              "expands, or into a contiguous copy", label_suffix());
}

void Tensor::copy_(const Tensor& src) const {
  ZDL_CHECK(shape() == src.shape(), "copy_: destination shape=", shape_str(shape()), " != source shape=",
            shape_str(src.shape()), label_suffix());
  if (numel() == 0) return;
  check_writable_in_place("copy_");  // each copy into a repeated element overwrote the last
  storage()->bump_version();  // [Note: version counter]
  if (device().is_cpu() && src.device().is_cpu()) return cpu_copy(*this, src);
#ifdef ZDL_WITH_CUDA
  if (device() == src.device()) return cuda_copy(*this, src);
  if (device().is_cpu()) {  // device -> host
    Tensor packed = packed_on_device(src, src.dtype());
    if (is_contiguous() && dtype() == src.dtype())
      return copy_bytes(raw_data(), Device::cpu(), packed.raw_data(), packed.device(), nbytes());
    Tensor host = Tensor::empty(shape(), src.dtype());
    copy_bytes(host.raw_data(), Device::cpu(), packed.raw_data(), packed.device(), host.nbytes());
    return cpu_copy(*this, host);
  }
  // -> a CUDA device, from the host or from another CUDA device: contiguous bytes in this dtype.
  Tensor packed = src;
  if (src.device().is_cpu()) {
    if (!(src.is_contiguous() && src.dtype() == dtype())) {
      packed = Tensor::empty(shape(), dtype());
      cpu_copy(packed, src);
    }
  } else {
    packed = packed_on_device(src, dtype());
  }
  if (is_contiguous()) return copy_bytes(raw_data(), device(), packed.raw_data(), packed.device(), nbytes());
  Tensor dev = copy_temp(shape(), dtype(), device());
  copy_bytes(dev.raw_data(), device(), packed.raw_data(), packed.device(), nbytes());
  cuda_copy(*this, dev);
#else
  // CPU-only build: no tensor can live on a CUDA device (its allocator refuses one).
  ZDL_CHECK(false, "copy_ ", src.device().str(), " -> ", device().str(), ": this zerodl build has no CUDA support");
#endif
}

void Tensor::fill_(double value) const {
  if (numel() == 0) return;
  storage()->bump_version();  // [Note: version counter]
  if (device().is_cpu()) {
    Tensor one = from_vector(std::vector<double>{value}, {}, dtype());
    // Broadcast copy: stride 0 over every dimension of the source.
    StridedRows<2> it;
    it.shape = shape();
    it.strides = {strides(), Shape(shape().size(), 0)};
    it = coalesce(it);
    void* d = raw_data();
    const void* s = one.raw_data();
    switch (element_size(dtype())) {
      case 2: return strided_copy_words(it, static_cast<uint16_t*>(d), static_cast<const uint16_t*>(s));
      case 4: return strided_copy_words(it, static_cast<uint32_t*>(d), static_cast<const uint32_t*>(s));
      case 8: return strided_copy_words(it, static_cast<uint64_t*>(d), static_cast<const uint64_t*>(s));
    }
    return;
  }
#ifdef ZDL_WITH_CUDA
  StridedRows<1> it;
  it.shape = shape();
  it.strides = {strides()};
  kernels::cuda::strided_fill(coalesce(it), dtype(), raw_data(), value);
#else
  copy_(Tensor::full(shape(), value, dtype()));
#endif
}

std::vector<double> Tensor::to_vector() const {
  Tensor host = to(Device::cpu());
  Tensor c = Tensor::empty(shape(), DType::F64);
  c.copy_(host);
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

std::vector<float> Tensor::to_float_vector() const {
  auto v = to_vector();
  return std::vector<float>(v.begin(), v.end());
}

std::vector<int64_t> Tensor::to_int_vector() const {
  Tensor c = Tensor::empty(shape(), DType::I64);
  c.copy_(to(Device::cpu()));
  const int64_t* p = c.data<int64_t>();
  return std::vector<int64_t>(p, p + c.numel());
}

double Tensor::item() const {
  ZDL_CHECK(numel() == 1, "item() needs a one-element tensor, got shape=", shape_str(shape()), label_suffix());
  return to_vector()[0];
}

AutogradMeta& Tensor::autograd_meta() const {
  TensorImpl* t = checked();
  if (!t->autograd) t->autograd = std::make_unique<AutogradMeta>();
  return *t->autograd;
}

std::string Tensor::to_string(int64_t max_elems) const {
  if (!defined()) return "Tensor(undefined)";
  std::ostringstream os;
  os << "Tensor(shape=" << shape_str(shape()) << ", dtype=" << dtype_name(dtype()) << ", device=" << device();
  if (!name().empty()) os << ", name=" << name();
  if (storage()->is_released()) {
    os << ", released)";
    return os.str();
  }
  // Only the shown values are read (a whole GPT-2 embedding used to be copied out to print 8).
  const int64_t shown = std::clamp<int64_t>(max_elems, 0, numel());
  const Tensor flat = is_contiguous() ? *this : contiguous_copy();
  const auto v = Tensor::from_storage(flat.storage(), {shown}, {1}, flat.offset(), dtype()).to_vector();
  os << ", values=[" << std::setprecision(6);
  for (int64_t i = 0; i < shown; ++i) os << (i ? ", " : "") << v[static_cast<size_t>(i)];
  if (numel() > shown) os << (shown ? ", ..." : "...");
  os << "])";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.to_string(); }

void check_defined(const Tensor& a, const char* op, const char* arg) {
  ZDL_CHECK(a.defined(), op, ": argument '", arg, "' is an undefined tensor");
}

void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  ZDL_CHECK(a.device() == b.device(), op, ": tensors on different devices: ", a.device().str(), " vs ",
            b.device().str(), " (shapes ", shape_str(a.shape()), " and ", shape_str(b.shape()), ")");
}

void check_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  ZDL_CHECK(a.dtype() == b.dtype(), op, ": dtype mismatch: ", dtype_name(a.dtype()), " vs ", dtype_name(b.dtype()),
            " (shapes ", shape_str(a.shape()), " and ", shape_str(b.shape()), ")");
}

}  // namespace zdl

#include "nn/layers.h"

#include "nn/batch_position.h"
#include "nn/parameter_factory.h"

namespace zdl::nn {

Linear::Linear(const LinearOptions& o) : Module("Linear"), options(o) {
  ZDL_CHECK(o.in > 0 && o.out > 0, "Linear: in and out must be positive, got in=", o.in, " out=", o.out);
  weight = register_parameter("weight", {o.out, o.in}, Init::normal(0.0, o.init_std));
  if (o.bias) bias = register_parameter("bias", {o.out}, Init::zeros());
}

Tensor Linear::forward(const Tensor& x) {
  check_defined(x, "Linear", "x");
  ZDL_CHECK(x.dim() >= 1 && x.size(-1) == options.in, "Linear: in_features ", options.in, " != x.size(-1) ",
            x.dim() ? x.size(-1) : 0, ", x.shape=", shape_str(x.shape()));
  return linear(x, weight, bias);
}

std::string Linear::extra_repr() const {
  return detail::str("in=", options.in, ", out=", options.out, ", bias=", options.bias ? "true" : "false");
}

Embedding::Embedding(const EmbeddingOptions& o) : Module("Embedding"), options(o) {
  ZDL_CHECK(o.num > 0 && o.dim > 0, "Embedding: num and dim must be positive, got num=", o.num, " dim=", o.dim);
  weight = register_parameter("weight", {o.num, o.dim}, Init::normal(0.0, o.init_std));
}

Tensor Embedding::forward(const Tensor& ids) { return embedding(weight, ids); }

std::string Embedding::extra_repr() const { return detail::str("num=", options.num, ", dim=", options.dim); }

LayerNorm::LayerNorm(const LayerNormOptions& o) : Module("LayerNorm"), options(o) {
  ZDL_CHECK(o.dim > 0, "LayerNorm: dim must be positive, got ", o.dim);
  weight = register_parameter("weight", {o.dim}, Init::ones());
  if (o.bias) bias = register_parameter("bias", {o.dim}, Init::zeros());
}

Tensor LayerNorm::forward(const Tensor& x) {
  check_defined(x, "LayerNorm", "x");
  ZDL_CHECK(x.dim() >= 1 && x.size(-1) == options.dim, "LayerNorm: dim ", options.dim, " != x.size(-1) ",
            x.dim() ? x.size(-1) : 0, ", x.shape=", shape_str(x.shape()));
  return layer_norm(x, weight, bias, options.eps);
}

std::string LayerNorm::extra_repr() const { return detail::str("dim=", options.dim, ", eps=", options.eps); }

Dropout::Dropout(double p_) : Module("Dropout"), p(p_) {
  ZDL_CHECK(p >= 0.0 && p < 1.0, "Dropout: p must be in [0, 1), got ", p);
  ParameterSpec spec;  // borrow the init context's seed and a stream of our own
  InitContext::assign(spec);
  seed = spec.seed;
  stream = spec.stream;
}

namespace {
// splitmix64's finalizer: a bijection on 64 bits that spreads every input bit.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

Tensor Dropout::forward(const Tensor& x) {
  if (!is_training() || p == 0.0) return x;
  const BatchPosition* pos = BatchPosition::current();
  if (pos == nullptr) {
    uint64_t s = (stream << 32) ^ calls++;
    return dropout(x, p, true, seed, s);
  }
  ZDL_CHECK(x.dim() >= 1, "Dropout under a BatchPosition: the input needs a batch dimension, got shape=",
            shape_str(x.shape()));
  if (pos->id != position_id_) position_id_ = pos->id, position_calls_ = 0;
  // Key: the run's seed; stream: (module, step, call); counter: the element's index in the
  // whole step's batch.
  // Philox streams are 64-bit keys: mixing keeps (module, step, call) triples apart.
  const uint64_t s = mix64(mix64(stream ^ 0x9e3779b97f4a7c15ull) ^ static_cast<uint64_t>(pos->step)) + position_calls_++;
  const int64_t per_row = x.size(0) ? x.numel() / x.size(0) : 0;
  return dropout(x, p, true, pos->seed, s, pos->first_sequence * per_row);
}

void Dropout::set_random_counters(const std::vector<uint64_t>& c) {
  ZDL_CHECK(c.size() == 3, "Dropout::set_random_counters: expected 3 counters, got ", c.size());
  calls = c[0], position_id_ = c[1], position_calls_ = c[2];
}

std::string Dropout::extra_repr() const { return detail::str("p=", p); }

}  // namespace zdl::nn

// The basic layers: Linear, Embedding, LayerNorm, Dropout, GELU. Each has an Options struct
// and registers its parameters in the constructor with GPT-2-style default inits.
//
//   auto fc = std::make_shared<nn::Linear>(nn::LinearOptions{.in = 768, .out = 3072});
//   Tensor y = (*fc)(x);   // [..., 768] -> [..., 3072]
#pragma once
#include "nn/module.h"

namespace zdl::nn {

struct LinearOptions {
  int64_t in = 0;
  int64_t out = 0;
  bool bias = true;
  double init_std = 0.02;  // weight ~ N(0, init_std); bias = 0
};

// y = x W^T + b, W: (out, in), b: (out).
class Linear : public Module {
 public:
  explicit Linear(const LinearOptions& o);
  Linear(int64_t in, int64_t out, bool bias = true) : Linear(LinearOptions{in, out, bias}) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  LinearOptions options;
  Tensor weight;  // (out, in)
  Tensor bias;    // (out) or undefined
};

struct EmbeddingOptions {
  int64_t num = 0;  // rows (vocabulary or positions)
  int64_t dim = 0;
  double init_std = 0.02;
};

// ids (any shape, i32/i64) -> [ids..., dim]; weight: (num, dim).
class Embedding : public Module {
 public:
  explicit Embedding(const EmbeddingOptions& o);
  Embedding(int64_t num, int64_t dim) : Embedding(EmbeddingOptions{num, dim}) {}
  Tensor forward(const Tensor& ids) override;
  std::string extra_repr() const override;

  EmbeddingOptions options;
  Tensor weight;  // (num, dim)
};

struct LayerNormOptions {
  int64_t dim = 0;
  double eps = 1e-5;
  bool bias = true;
};

// Normalizes the last dim; weight = 1, bias = 0 at init.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(const LayerNormOptions& o);
  explicit LayerNorm(int64_t dim) : LayerNorm(LayerNormOptions{dim}) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  LayerNormOptions options;
  Tensor weight;  // (dim)
  Tensor bias;    // (dim) or undefined
};

// Inverted dropout from the counter-based RNG. Inside an nn::BatchPosition (training loops
// set one) row j of the input is keyed by (the position's seed, module, step, call within the
// position, first sequence + j): the same mask however the rows are split over ranks and micro-batches
// ([Note: dropout position]). Outside one, each call draws a fresh mask keyed by (module,
// call counter), and the counter is training state: `calls`.
class Dropout : public Module {
 public:
  explicit Dropout(double p);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  std::vector<uint64_t> random_counters() const override { return {calls, position_id_, position_calls_}; }
  void set_random_counters(const std::vector<uint64_t>& c) override;

  double p;
  uint64_t seed = 0;    // outside a BatchPosition: the init seed
  uint64_t stream = 0;  // registration order
  uint64_t calls = 0;   // calls outside any BatchPosition

 private:
  uint64_t position_id_ = 0;     // the BatchPosition the next count belongs to
  uint64_t position_calls_ = 0;  // calls within it
};

class GELU : public Module {
 public:
  GELU() : Module("GELU") {}
  Tensor forward(const Tensor& x) override { return gelu(x); }
};

}  // namespace zdl::nn

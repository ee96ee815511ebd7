#include "nn/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/rng.h"

namespace zdl::nn {

std::vector<int64_t> generate(GPT& model, std::vector<int64_t> ids, const SampleOptions& o) {
  ZDL_CHECK(o.temperature > 0, "generate: temperature must be > 0, got ", o.temperature);
  ZDL_CHECK(o.top_k >= 0, "generate: top_k must be >= 0, got ", o.top_k);
  ZDL_CHECK(!ids.empty(), "generate: the prompt must hold at least one token");
  NoGradGuard ng;
  bool was_training = model.is_training();
  model.eval();
  Philox rng(o.seed, 0x5A4D504CEull);
  const int64_t V = model.config.vocab_size;
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    int64_t T = std::min<int64_t>(static_cast<int64_t>(ids.size()), model.config.block_size);
    std::vector<int64_t> ctx(ids.end() - T, ids.end());
    // The ids go where the model is (a GPU model reads them there).
    Tensor ids_t = Tensor::from_vector(ctx, {1, T}, DType::I64).to(model.wte->weight.device());
    Tensor logits = model.logits(ids_t);  // [1, T, V]
    std::vector<double> last = slice(logits, 1, T - 1, T).to_vector();           // V values
    for (double& v : last) v /= o.temperature;
    if (o.top_k > 0 && o.top_k < V) {
      std::vector<double> sorted = last;
      std::nth_element(sorted.begin(), sorted.begin() + (o.top_k - 1), sorted.end(), std::greater<double>());
      double kth = sorted[o.top_k - 1];
      for (double& v : last)
        if (v < kth) v = -INFINITY;
    }
    double mx = *std::max_element(last.begin(), last.end());
    double total = 0;
    for (double& v : last) total += (v = std::exp(v - mx));
    double u = rng.uniform(static_cast<uint64_t>(step)) * total;
    int64_t pick = V - 1;
    for (int64_t i = 0; i < V; ++i) {
      u -= last[i];
      if (u < 0) {
        pick = i;
        break;
      }
    }
    ids.push_back(pick);
    if (o.on_token) o.on_token(pick);
  }
  model.train(was_training);
  return ids;
}

}  // namespace zdl::nn

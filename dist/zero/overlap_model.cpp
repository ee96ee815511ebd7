#include "dist/zero/overlap_model.h"

#include <algorithm>

namespace zdl::dist {

double ring_collective_seconds(int64_t bytes, int64_t N, const LinkModel& link) {
  if (N <= 1) return 0;
  const double n = static_cast<double>(N);
  return (n - 1) * (link.latency_s + static_cast<double>(bytes) / (n * link.bytes_per_s));
}

double block_forward_flops_per_token(int64_t seq, int64_t n_embd) {
  const double C = static_cast<double>(n_embd), T = static_cast<double>(seq);
  return 24 * C * C + 4 * T * C;
}

BlockOverlap block_overlap(int64_t block_bytes, int64_t tokens, int64_t seq, int64_t n_embd, int64_t N,
                           double flops_per_s, const LinkModel& link, int prefetch, bool recompute) {
  BlockOverlap o;
  const double per_token = block_forward_flops_per_token(seq, n_embd);
  o.forward_s = per_token * static_cast<double>(tokens) / flops_per_s;
  o.backward_s = (recompute ? 3 : 2) * o.forward_s;
  o.gather_s = ring_collective_seconds(block_bytes, N, link);
  o.reduce_scatter_s = o.gather_s;  // the same ring, the same bytes
  if (prefetch > 0) {
    o.forward_exposed_s = std::max(0.0, o.gather_s - o.forward_s);
    o.backward_exposed_s = std::max(0.0, o.gather_s + o.reduce_scatter_s - o.backward_s);
  } else {
    o.forward_exposed_s = o.gather_s;
    o.backward_exposed_s = o.gather_s + std::max(0.0, o.reduce_scatter_s - o.backward_s);
  }
  o.tokens_to_hide_forward = o.gather_s * flops_per_s / per_token;
  return o;
}

}  // namespace zdl::dist

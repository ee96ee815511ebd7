#include "nn/gpt_memory.h"

#include <algorithm>

namespace zdl::nn {

TrainingMemoryFloor training_memory_floor(const GPTConfig& c, int64_t batch, int64_t seq, int world,
                                          bool optimizer_offloaded, int64_t element_bytes) {
  TrainingMemoryFloor f;
  const double V = static_cast<double>(c.padded_vocab());
  const double rows = static_cast<double>(std::max<int64_t>(1, batch / world));
  f.parameters = c.num_parameters();
  f.states = static_cast<double>(optimizer_offloaded ? 2 * element_bytes : 16) * f.parameters / world;
  f.logits = rows * static_cast<double>(seq) * V * 2 * static_cast<double>(element_bytes);
  return f;
}

}  // namespace zdl::nn

// The least memory training a GPT takes on one rank, whatever the ZeRO stage: a model that does
// not fit even so can be refused at startup, before a failed allocation (or the OOM killer) part
// way through building it.
#pragma once
#include <cstdint>

#include "nn/gpt.h"

namespace zdl::nn {

struct TrainingMemoryFloor {
  double parameters = 0;  // the model's count
  double states = 0;      // bytes: 16 per parameter (value, gradient, Adam's states) over the ranks;
                          // 2 s with the optimizer states offloaded (host memory or NVMe): the
                          // value and the gradient, s bytes each (4 f32, 2 bf16)
  double logits = 0;      // bytes: one micro-batch's logits and their gradient, 2 s per entry
  double total() const { return states + logits; }
};

// For a global batch of `batch` sequences of `seq` tokens over `world` ranks (batch / world rows
// per rank, at least 1). In double: configs far too large to build must still be measured.
TrainingMemoryFloor training_memory_floor(const GPTConfig& c, int64_t batch, int64_t seq, int world,
                                          bool optimizer_offloaded = false, int64_t element_bytes = 4);

}  // namespace zdl::nn

// zero_walkthrough's flags as parsed (examples/zero_walkthrough.cpp defines them and their
// help), shared by the program's parts in this folder.
#pragma once
#include <cstdint>
#include <string>

#include "nn/gpt.h"

namespace zdl::walkthrough {

struct Args {
  std::string device = "cpu";
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  int64_t seq = 64;
  int64_t batch = 8;
  int64_t steps = 4;
  std::string dtype = "f32";
  double lr = 1e-3;
  double grad_clip = 1.0;
  uint64_t seed = 1337;
  int prefetch = 1;
  bool compare_prefetch = true;
  bool compare_checkpoint = true;
  double cap_mib = 40;
  int64_t fit_max_layers = 192;
  std::string offload_dir;  // the cap search's NVMe offload rows ("": skipped)
  double loss_tol = 0;  // relative loss difference allowed between stages (0: identical)
  std::string out = "walkthrough_out";
};

// The GPT of every run: the flags' shape with `n_layer` blocks (the cap experiment varies it).
inline nn::GPTConfig gpt_config(const Args& a, int64_t n_layer) {
  return nn::GPTConfig{.vocab_size = 256, .block_size = a.seq, .n_layer = n_layer, .n_head = a.n_head,
                       .n_embd = a.n_embd};
}

}  // namespace zdl::walkthrough

// train_gpt's flags as parsed (examples/train_gpt.cpp defines them and their help), shared by
// the program's parts in this folder.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace zdl::train_gpt {

struct Args {
  std::string data;
  int64_t steps = 300;
  int64_t batch = 16;
  int64_t seq = 64;
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  int64_t vocab_multiple = 1;
  double lr = 3e-3;
  double min_lr_ratio = 0.1;
  int64_t warmup = 30;
  double weight_decay = 0.1;
  double grad_clip = 1.0;
  double dropout = 0.0;
  int64_t activation_checkpointing = 0;  // recompute blocks 0, k, 2k, ... in backward (0: off)
  uint64_t seed = 1337;
  int64_t grad_accum = 1;
  int64_t eval_every = 100;
  int64_t eval_batches = 20;
  double val_fraction = 0.1;
  std::string save;
  std::string export_hf;  // a Hugging Face directory of the model, written at the end
  int64_t save_every = 0;
  int64_t stop_after = 0;
  std::string resume;
  std::string init_from;
  bool eval_only = false;
  int64_t sample = 0;
  std::string prompt = "\n";
  double temperature = 0.8;
  int64_t top_k = 40;
  std::string metrics;
  bool metrics_all_ranks = false;
  int64_t log_every = 0;
  int zero_stage = 0;
  std::string dtype = "f32";
  int prefetch = 1;
  int shard_group = 0;     // hybrid sharding: shard within groups of K ranks (0: all ranks)
  bool secondary_partition = false;  // ZeRO++'s hpZ
  std::string quantize_weights = "none";  // ZeRO++'s qwZ: none or int8
  std::string quantize_grads = "none";    // ZeRO++'s qgZ: none or int8
  int ranks_per_node = 0;  // 0: as launched; K: pose the ranks as nodes of K (docs/multinode.md)
  int64_t max_memory_per_rank = 0;
  std::string offload_optimizer = "none";  // none, cpu, nvme (docs/offload.md)
  std::string offload_params = "none";     // none, nvme
  std::string offload_dir;
  std::string offload_io = "direct";       // direct (O_DIRECT where the filesystem allows), cached
  double offload_window_mib = 0;           // optimizer states held outside the step to hide their I/O
  double collective_timeout = 0;
  std::string on_nan = "stop";
  std::string reduction = "exact";
  int64_t nan_skip_limit = 10;
  std::string fault_nan_grad;  // test hook "STEP:PARAM" (hidden flag)
  std::string device = "cpu";
  std::string dist_backend = "auto";
  double peak_tflops = 0;  // 0: from the GPU's name
  int64_t vocab_size = 0;  // 0: the data's (bytes: 256; llm.c shards: the tokenizer's, or GPT-2's 50257)
  std::string tokenizer;   // BPE files of the shards' tokens: --prompt and --sample on them
};

// Whether the command line gave `flag` (a default may equal a given value).
inline bool given(const CLI::App& app, const char* flag) { return app.count(flag) > 0; }

}  // namespace zdl::train_gpt

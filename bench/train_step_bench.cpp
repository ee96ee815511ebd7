// Training throughput of a fixed small GPT on the CPU: forward + backward + AdamW per step,
// random tokens, f32. Prints one machine-readable line; bench/run_train_step.sh puts it next
// to the same model in PyTorch (bench/torch_train_step.py) measured in the same run.
//
//   train_step_bench [--layers 4 --heads 4 --embd 256 --seq 128 --batch 8 --vocab 256 --steps 20 --warmup 3
//                     --checkpoint K --dtype f32|bf16 --gemm eigen,avx2]
// --checkpoint K: activation checkpointing of blocks 0, K, 2K, ... (0: off); the line then also
// gives the step's activation peak (bytes, from the memory ledger).
// --dtype bf16: mixed precision as train_gpt --dtype bf16 runs it (bf16 parameters, activations
// and gradients; f32 masters and AdamW moments), through dist::Trainer on one rank; f32 (the
// default) is the plain loop below. Torch's twin is autocast (bench/torch_train_step.py).
// --gemm A,B[,...]: the f32 GEMM back ends (eigen, avx2, avx512, onednn: kernels/cpu/matmul.h) taken in
// turn, one per step, and one line per back end with its median step. Alternating step by step
// lets a comparison see the same machine load, which on a shared machine drifts by more than the
// difference between back ends from one process to the next.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "dist/comm/communicator.h"
#include "dist/zero/trainer.h"
#include "dist/zero/partitioner.h"
#include "dist/zero/zero_adamw.h"
#include "core/check.h"
#include "io/program_flags.h"
#include "kernels/cpu/matmul.h"
#include "nn/activation_checkpoint.h"
#include "nn/gpt.h"
#include "nn/parameter_factory.h"
#include "optim/optimizer.h"
#include "optim/param_groups.h"

using namespace zdl;

namespace {

// The back ends a --gemm list names, each checked against this build and CPU.
std::vector<kernels::cpu::GemmBackend> gemms_named(const std::string& list) {
  std::vector<kernels::cpu::GemmBackend> out;
  for (size_t at = 0; at <= list.size();) {
    const size_t comma = std::min(list.find(',', at), list.size());
    out.push_back(kernels::cpu::gemm_backend_named(list.substr(at, comma - at).c_str()));
    kernels::cpu::set_gemm_backend(out.back());  // throws if this build or CPU lacks it
    at = comma + 1;
  }
  return out;
}

int run(int64_t L, int64_t H, int64_t C, int64_t T, int64_t B, int64_t V, int64_t steps, int64_t warmup,
        int64_t checkpoint, bool bf16, const std::vector<kernels::cpu::GemmBackend>& gemms);

}  // namespace

int main(int argc, char** argv) {
  int64_t L = 4, H = 4, C = 256, T = 128, B = 8, V = 256, steps = 20, warmup = 3, checkpoint = 0;
  std::string dtype = "f32", gemm_list;
  CLI::App app{"train_step_bench: tokens/s of a small GPT's training step on the CPU (bench/run_train_step.sh)"};
  // A repeated flag: the last wins (profile_train_step.sh appends its own --steps).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)->always_capture_default();
  app.add_option("--layers", L, "n_layer")->check(CLI::PositiveNumber);
  app.add_option("--heads", H, "n_head")->check(CLI::PositiveNumber);
  app.add_option("--embd", C, "n_embd (a multiple of --heads)")->check(CLI::PositiveNumber);
  app.add_option("--seq", T, "sequence length")->check(CLI::PositiveNumber);
  app.add_option("--batch", B, "sequences per step")->check(CLI::PositiveNumber);
  app.add_option("--vocab", V, "vocabulary size")->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "timed steps (per back end)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed steps first")->check(CLI::NonNegativeNumber);
  app.add_option("--checkpoint", checkpoint, "activation checkpointing of blocks 0, K, 2K, ... (0: off)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--dtype", dtype, "f32, or bf16 (mixed precision as train_gpt's)")->check(CLI::IsMember({"f32", "bf16"}));
  app.add_option("--gemm", gemm_list, "f32 GEMM back ends taken in turn, one per step: eigen,avx2,avx512,onednn "
                                      "(default: ZDL_CPU_GEMM's, or zerodl's choice for this CPU)");
  if (std::optional<int> code = io::check_invocation("train_step_bench", app, argc, argv)) return *code;
  std::vector<kernels::cpu::GemmBackend> gemms;
  try {
    gemms = gemm_list.empty() ? std::vector{kernels::cpu::gemm_backend()} : gemms_named(gemm_list);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_step_bench: %s%s\n", gemm_list.empty() ? "" : "--gemm: ",
                 without_code_location(e.what()).c_str());
    return 2;
  }
  if (C % H != 0) {
    std::fprintf(stderr, "train_step_bench: --embd %lld must be a multiple of --heads %lld\n",
                 static_cast<long long>(C), static_cast<long long>(H));
    return 2;
  }
  try {
    return run(L, H, C, T, B, V, steps, warmup, checkpoint, dtype == "bf16", gemms);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_step_bench: error: %s\n", without_code_location(e.what()).c_str());
    return 1;
  }
}

namespace {

int run(int64_t L, int64_t H, int64_t C, int64_t T, int64_t B, int64_t V, int64_t steps, int64_t warmup,
        int64_t checkpoint, bool bf16, const std::vector<kernels::cpu::GemmBackend>& gemms) {
  nn::GPTConfig cfg{.vocab_size = V, .block_size = T, .n_layer = L, .n_head = H, .n_embd = C};
  std::shared_ptr<nn::GPT> model;
  std::unique_ptr<dist::ZeroPartitioner> zero;
  if (bf16) {
    zero = std::make_unique<dist::ZeroPartitioner>(
        dist::init(), dist::ZeroOptions{.stage = dist::ZeroStage::DDP, .compute_dtype = DType::BF16});
    auto scope = zero->placement_scope(/*seed=*/1);
    model = std::make_shared<nn::GPT>(cfg);
  } else {
    nn::InitContext ctx(1);
    model = std::make_shared<nn::GPT>(cfg);
  }
  nn::checkpoint_every(model->h, checkpoint);
  std::unique_ptr<optim::AdamW> opt;
  std::unique_ptr<dist::ZeroAdamW> zero_opt;
  std::unique_ptr<dist::Trainer> trainer;
  if (bf16) {
    zero->wrap(*model);
    zero_opt = std::make_unique<dist::ZeroAdamW>(*zero, optim::AdamWOptions{.lr = 3e-4}, /*weight_decay=*/0.1);
    trainer = std::make_unique<dist::Trainer>(*zero, *zero_opt, dist::TrainerOptions{.micro_batch = B});
  } else {
    opt = std::make_unique<optim::AdamW>(optim::decay_groups(*model, 0.1), optim::AdamWOptions{.lr = 3e-4});
  }
  model->train();
  int64_t activation_peak = 0;
  std::vector<std::vector<double>> ms(gemms.size());  // per back end
  double loss = 0;
  const int64_t n = static_cast<int64_t>(gemms.size());
  for (int64_t s = 0; s < warmup + steps * n; ++s) {
    kernels::cpu::set_gemm_backend(gemms[static_cast<size_t>(s % n)]);
    Tensor ids = Tensor::rand({B, T + 1}, 100 + s, DType::F32, Device::cpu(), 0, 0, V).to(DType::I64);
    Tensor x = contiguous(slice(ids, 1, 0, T)), y = contiguous(slice(ids, 1, 1, T + 1));
    const int64_t act0 = memory_ledger().stats(Device::cpu()).current_of(MemoryCategory::Activation);
    memory_ledger().reset_peaks(Device::cpu());
    auto t0 = std::chrono::steady_clock::now();
    if (bf16) {
      auto rows = [&](int64_t, int64_t, int64_t) { return dist::Trainer::Batch{x, y}; };
      auto loss_fn = [&](const Tensor& in, const Tensor& target) { return model->loss(in, target); };
      loss = trainer->step(s, rows, loss_fn).loss;
    } else {
      Tensor l = model->loss(x, y);
      l.backward();
      opt->step();
      opt->zero_grad();
      loss = l.item();
    }
    auto t1 = std::chrono::steady_clock::now();
    if (s >= warmup) ms[static_cast<size_t>(s % n)].push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    activation_peak = memory_ledger().stats(Device::cpu()).peak_of(MemoryCategory::Activation) - act0;
  }
  for (size_t g = 0; g < gemms.size(); ++g) {
    std::sort(ms[g].begin(), ms[g].end());
    const double med = ms[g][ms[g].size() / 2];
    std::printf("zerodl dtype=%s params=%lld step_ms=%.2f tokens_per_s=%.0f loss=%.17g activation_peak=%lld gemm=%s\n",
                bf16 ? "bf16" : "f32", static_cast<long long>(model->num_parameters()), med, B * T / (med / 1000.0),
                loss, static_cast<long long>(activation_peak), kernels::cpu::gemm_backend_name(gemms[g]));
  }
  return 0;
}

}  // namespace

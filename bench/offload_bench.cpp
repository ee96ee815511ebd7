// ZeRO-3 step time with NVMe offload (docs/offload.md) next to the same step without it and next
// to the bound the disk sets, measured in the same run on the same directory.
//
//   mpirun -n 4 offload_bench --dir /scratch [--layers 8 --heads 4 --embd 256 --seq 64 --batch 8
//                                             --dtype f32 --steps 6 --warmup 2 --io direct
//                                             --window-mib 0]
// Modes: none, optimizer (Adam's moments and bf16's masters on NVMe), optimizer+params (ZeRO-3's
// parameter shards too). Per mode, rank 0 prints the median step, the bytes each rank moved to and
// from its scratch file per step (NvmeStore's counters), the disk's bandwidth for that traffic
// (a write then a read of the same volume through an NvmeStore in --dir, before the modes run),
// and two ratios: the step over the step without offload, and over the bound
// max(step without offload, bytes / bandwidth): what perfect overlap of disk and compute reaches.
// --io direct (the default, O_DIRECT where the filesystem allows) measures the disk itself; --io
// cached goes through the page cache, whose bandwidth on a machine with memory to spare is the
// memory's. The table says which one the store used. --window-mib W > 0 adds both offload modes
// again with an optimizer window of W MiB (OffloadOptions::window_bytes): the first units' states
// read under the backward, the last units' written under the next forward; the table then also
// prints each mode's peak memory on rank 0, what the window costs.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "dist/comm/communicator.h"
#include "dist/offload/disk_bandwidth.h"
#include "dist/offload/nvme_store.h"
#include "dist/zero/partitioner.h"
#include "dist/zero/trainer.h"
#include "dist/zero/zero_adamw.h"
#include "io/environment.h"
#include "nn/gpt.h"

using namespace zdl;

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

struct ModeResult {
  std::string name;
  double step_ms = 0, opt_ms = 0, loss = 0;  // medians: the whole step, its optimizer step
  int64_t bytes_per_step = 0;
  int64_t peak_bytes = 0;  // rank 0's memory at its highest during the steps
};

constexpr const char* kUsage =
    "usage: mpirun -n N offload_bench --dir DIR [--layers 8 --heads 4 --embd 256 --seq 64 --batch 8 --dtype f32\n"
    "                                  --steps 6 --warmup 2 --io direct|cached --window-mib 0]\n"
    "ZeRO-3 step time with NVMe offload (files in DIR) next to the step without it (docs/offload.md)\n";

int run(int argc, char** argv);

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::printf("%s", kUsage);
      return 0;
    }
  if (const std::string problem = io::environment_problem(); !problem.empty()) {
    std::fprintf(stderr, "offload_bench: %s\n", problem.c_str());
    return 2;
  }
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "offload_bench: %s\n", without_code_location(e.what()).c_str());
    return 1;
  }
}

namespace {

int run(int argc, char** argv) {
  int64_t L = 8, H = 4, C = 256, T = 64, B = 8, steps = 6, warmup = 2;
  std::string dir, dtype = "f32", io = "direct";
  double window_mib = 0;
  if (argc % 2 == 0) {
    std::fprintf(stderr, "offload_bench: every flag takes a value\n%s", kUsage);
    return 2;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--dir") dir = v;
    else if (k == "--dtype") dtype = v;
    else if (k == "--io") io = v;
    else if (k == "--layers") L = std::atoll(v.c_str());
    else if (k == "--heads") H = std::atoll(v.c_str());
    else if (k == "--embd") C = std::atoll(v.c_str());
    else if (k == "--seq") T = std::atoll(v.c_str());
    else if (k == "--batch") B = std::atoll(v.c_str());
    else if (k == "--steps") steps = std::atoll(v.c_str());
    else if (k == "--warmup") warmup = std::atoll(v.c_str());
    else if (k == "--window-mib") {
      char* end = nullptr;
      window_mib = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0' || !(window_mib >= 0 && window_mib <= 1e9)) {
        std::fprintf(stderr, "offload_bench: --window-mib takes MiB from 0 to 1e9, got %s\n%s", v.c_str(), kUsage);
        return 2;
      }
    }
    else {
      std::fprintf(stderr, "offload_bench: unknown flag %s\n%s", k.c_str(), kUsage);
      return 2;
    }
  }
  std::error_code ec;
  if (dir.empty() || !std::filesystem::is_directory(dir, ec) || (dtype != "f32" && dtype != "bf16") || (io != "direct" && io != "cached") || steps < 1 ||
      L < 1 || H < 1 || C < 1 || C % H != 0 || T < 1 || B < 1 || warmup < 0 || !(window_mib >= 0)) {
    std::fprintf(stderr, "offload_bench: needs --dir DIR (an existing directory); --dtype f32 or bf16; --io direct or cached; "
                         "--steps >= 1; --window-mib >= 0; "
                         "positive shapes with --embd a multiple of --heads\n%s", kUsage);
    return 2;
  }
  std::shared_ptr<dist::Communicator> comm = dist::init();
  const int N = comm->size();
  const bool lead = comm->rank() == 0;
  if (B % N != 0) {
    if (lead) std::fprintf(stderr, "offload_bench: --batch %lld must be divisible by %d ranks\n", static_cast<long long>(B), N);
    return 2;
  }
  const DType dt = dtype == "bf16" ? DType::BF16 : DType::F32;
  const nn::GPTConfig cfg{.vocab_size = 256, .block_size = T, .n_layer = L, .n_head = H, .n_embd = C};
  using dist::OffloadTarget;
  std::vector<std::pair<std::string, dist::OffloadOptions>> modes = {
      {"none", {}},
      {"optimizer", {.optimizer = OffloadTarget::Nvme, .dir = dir, .direct_io = io == "direct"}},
      {"optimizer+params",
       {.optimizer = OffloadTarget::Nvme, .params = OffloadTarget::Nvme, .dir = dir, .direct_io = io == "direct"}}};
  if (window_mib > 0)
    for (size_t m = 1; m < 3; ++m) {
      auto [name, o] = modes[m];
      o.window_bytes = static_cast<int64_t>(window_mib * 1024 * 1024);
      modes.emplace_back(name + ", window", o);
    }
  std::vector<ModeResult> results;
  bool direct_used = false;
  for (const auto& [name, offload] : modes) {
    dist::ZeroPartitioner zero(comm, {.stage = dist::ZeroStage::Three, .compute_dtype = dt, .offload = offload});
    std::shared_ptr<nn::GPT> model;
    {
      auto scope = zero.placement_scope(1);
      model = std::make_shared<nn::GPT>(cfg);
    }
    zero.wrap(*model);
    dist::ZeroAdamW opt(zero, {.lr = 3e-4}, 0.1);
    dist::Trainer trainer(zero, opt, {.micro_batch = B / N});
    auto rows = [&](int64_t s, int64_t first, int64_t count) {
      Tensor ids = Tensor::rand({B, T + 1}, 100 + s, DType::F32, Device::cpu(), 0, 0, 256).to(DType::I64);
      Tensor mine = slice(ids, 0, first, first + count);
      return dist::Trainer::Batch{contiguous(slice(mine, 1, 0, T)), contiguous(slice(mine, 1, 1, T + 1))};
    };
    auto loss = [&](const Tensor& x, const Tensor& y) { return model->loss(x, y); };
    std::vector<double> ms, opt_ms;
    double opt_begin = 0;
    zero.set_trace([&](const dist::TraceEvent& e) {
      if (e.kind == dist::TraceKind::StepBegin) opt_begin = e.t_us;
      if (e.kind == dist::TraceKind::StepEnd) opt_ms.push_back((e.t_us - opt_begin) / 1000.0);
    });
    ModeResult r{name};
    memory_ledger().reset_peaks(Device::cpu());
    int64_t io0 = 0;
    for (int64_t s = 0; s < warmup + steps; ++s) {
      if (s == warmup && zero.nvme_store()) io0 = zero.nvme_store()->bytes_read() + zero.nvme_store()->bytes_written();
      comm->barrier();
      const auto t0 = Clock::now();
      r.loss = trainer.step(s, rows, loss).loss;
      if (s >= warmup) ms.push_back(ms_since(t0));
    }
    std::sort(ms.begin(), ms.end());
    r.step_ms = ms[ms.size() / 2];
    opt_ms.erase(opt_ms.begin(), opt_ms.begin() + static_cast<std::ptrdiff_t>(warmup));
    std::sort(opt_ms.begin(), opt_ms.end());
    r.opt_ms = opt_ms[opt_ms.size() / 2];
    r.peak_bytes = memory_ledger().stats(Device::cpu()).total_peak;
    if (zero.nvme_store()) direct_used = zero.nvme_store()->direct();
    if (zero.nvme_store())
      r.bytes_per_step = (zero.nvme_store()->bytes_read() + zero.nvme_store()->bytes_written() - io0) / steps;
    results.push_back(r);
  }
  // The disk's bandwidth for the largest mode's traffic (each rank measures its own share at once).
  comm->barrier();
  const auto [write_gbs, read_gbs] =
      dist::measure_disk_bandwidth(dir, comm->prefix(), std::max<int64_t>(results.back().bytes_per_step / 2, 1), io == "direct");
  const double gbs = 2.0 / (1.0 / write_gbs + 1.0 / read_gbs);  // half written, half read
  if (!lead) return 0;
  std::printf("ZeRO-3 on %d ranks, GPT L%lld H%lld C%lld T%lld B%lld %s (%lld parameters), %lld steps after %lld warm-up\n",
              N, static_cast<long long>(L), static_cast<long long>(H), static_cast<long long>(C), static_cast<long long>(T),
              static_cast<long long>(B), dtype.c_str(), static_cast<long long>(cfg.num_parameters()),
              static_cast<long long>(steps), static_cast<long long>(warmup));
  std::printf("disk (%s, %s): write %.2f GB/s, read %.2f GB/s per rank, all ranks at once\n", dir.c_str(),
              direct_used ? "direct I/O" : io == "direct" ? "page cache: the filesystem refuses direct I/O" : "page cache",
              write_gbs, read_gbs);
  std::printf("%-26s %10s %10s %14s %12s %12s %14s %12s %14s\n", "offload", "step ms", "opt ms", "MB/step/rank",
              "I/O ms", "vs none", "vs bound", "peak MiB", "loss");
  const double none_ms = results[0].step_ms;
  for (const ModeResult& r : results) {
    const double io_ms = static_cast<double>(r.bytes_per_step) / (gbs * 1e9) * 1000.0;
    std::printf("%-26s %10.2f %10.2f %14.2f %12.2f %11.2fx %13.2fx %12.2f %14.6f\n", r.name.c_str(), r.step_ms, r.opt_ms,
                static_cast<double>(r.bytes_per_step) / 1e6, io_ms, r.step_ms / none_ms,
                r.step_ms / std::max(none_ms, io_ms), static_cast<double>(r.peak_bytes) / (1024.0 * 1024.0), r.loss);
  }
  std::printf("losses equal across modes: %s\n",
              std::all_of(results.begin(), results.end(), [&](const ModeResult& r) { return r.loss == results[0].loss; })
                  ? "yes"
                  : "NO");
  return 0;
}

}  // namespace

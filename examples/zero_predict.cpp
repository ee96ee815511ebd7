// zero_predict: what DDP and ZeRO-1/2/3 need per rank for any GPT at any N, from the closed forms
// that the walkthrough prints next to its measured ledgers and that the tests check against them
// (dist/zero/closed_forms.h): model-state bytes by category after a step and at the step's
// peak, the activations the forward keeps, bytes on the wire per step, and the largest model
// (in blocks, at the given width) that fits a memory budget. Nothing is built or run: it takes
// a second for GPT-2 XL on 1024 ranks.
//
//   zero_predict --model gpt2-xl --ranks 1,8,64,1024 --dtype bf16
//   zero_predict --model gpt2 --memory-gib 16 --micro-batch 4       # + the largest n_layer that fits
//   zero_predict --n-layer 2 --n-embd 35 --n-head 5 --vocab 256 --seq 32 --ranks 2 --out DIR
//   zero_predict --model gpt2-xl --ranks 8,64 --dtype bf16 --tflops 400 --link-gbps 50  # + overlap
//   zero_predict --model gpt2-xl --ranks 8 --offload-optimizer nvme --offload-params nvme  # + offload
//   zero_predict --model gpt2-xl --ranks 8 --dtype bf16 --offload-optimizer cpu   # + a GPU's host tier
//   zero_predict --model gpt2-xl --ranks 8,64,1024 --dtype bf16 --ranks-per-node 8 \
//       --tflops 400 --intra-gbps 450 --inter-gbps 200 --micro-batch 8   # past one node
//
// --out writes predict_memory_n<N>.csv and predict_traffic_n<N>.csv in the columns of the
// walkthrough's memory_n<N>.csv and traffic_n<N>.csv, so a prediction and a measurement of the
// same model compare row by row (tests/examples/zero_walkthrough_test.py does, exactly).
//
// Counted: the model states (parameters, gradients, optimizer states: s, s, K bytes an element;
// f32 s = 4, K = 8; bf16 s = 2, K = 12, the f32 master weights included), the reduce-scatter
// buffer, and the activations each block keeps from forward to backward (per token
// (17 C + NH + 4) s; C s under activation checkpointing, plus one block's while it recomputes).
// Not counted: the logits and the forward's temporaries (the walkthrough measures those), the
// allocator's slack, the framework itself. The step peak is an estimate, not a bound: it adds
// each category's own peak, though they come at different moments (an over-count), and leaves
// out the above (an under-count). Measured peaks ran from 0.98x the estimate (the walkthrough's
// model) to 1.25x (a model whose logits outweigh its blocks): docs/walkthrough.md. The table,
// the peak and --memory-gib count every state in memory; with --offload-* the offload lines
// below it say what leaves.
//
// With --tflops (the compute rate a rank reaches) and --link-gbps / --link-latency-us (its link),
// also ZeRO-3's overlap per block: the forward and backward compute next to the all-gather and
// reduce-scatter a ring takes, whether --prefetch 1 hides them, the time a step waits for what it
// does not, and the micro-batch from which the forward hides the gather (dist/zero/overlap_model.h).
//
// With --offload-optimizer nvme / --offload-params nvme (train_gpt's flags, docs/offload.md):
// per stage, what stays in memory after a step, what lives on the rank's disk, and the bytes a
// step of --grad-accum micro-steps reads and writes there (dist::offloaded_bytes_closed_form,
// dist::offload_traffic_closed_form). With --offload-optimizer cpu (optimizer offload to host
// memory on a GPU): per stage, what stays on the GPU, what the host holds, and the bytes that
// cross between them each way per step (dist::host_tier_bytes_closed_form).
//
// With --ranks-per-node R: per N, the layouts past one node (DDP, ZeRO-3, hybrid sharding with
// a node as the group, ZeRO-3 with hpZ, all of ZeRO++): model states per rank and bytes per step
// within and across nodes; with --tflops --intra-gbps --inter-gbps, a step's time between no
// overlap and full overlap (print_cluster below; docs/multinode.md).
//
// Exit codes: 0 done, 2 bad flags.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "data/byte_tokenizer.h"
#include "dist/zero/closed_forms.h"
#include "dist/zero/overlap_model.h"
#include "io/program_flags.h"

using namespace zdl;
using dist::ZeroStage;

namespace {

constexpr ZeroStage kStages[] = {ZeroStage::DDP, ZeroStage::One, ZeroStage::Two, ZeroStage::Three};

struct Args {
  std::string model;
  int64_t n_layer = 12, n_embd = 768, n_head = 12, vocab = 50257, seq = 1024, vocab_multiple = 1;
  std::vector<int64_t> ranks = {1, 2, 4, 8, 64, 1024};
  std::string dtype = "f32";
  int64_t micro_batch = 1;
  int64_t checkpoint_every = 0;  // train_gpt's --activation-checkpointing K: blocks 0, K, 2K, ...
  int prefetch = 1;
  double memory_gib = 0;
  double tflops = 0, link_gbps = 0, link_latency_us = 5;  // the overlap model (0: not asked)
  std::string offload_optimizer = "none", offload_params = "none";
  int64_t grad_accum = 1;  // micro-steps per step: each repeats the gathers and the reduction
  // The cluster (docs/multinode.md): ranks per node, and with --tflops each link's bandwidth.
  int64_t ranks_per_node = 0;
  double intra_gbps = 0, inter_gbps = 0;
  std::string out;
};

// GPT-2's published sizes (the ZeRO paper's models are of this family).
void apply_model(Args& a) {
  const std::map<std::string, std::array<int64_t, 3>> sizes = {
      {"gpt2", {12, 768, 12}}, {"gpt2-medium", {24, 1024, 16}}, {"gpt2-large", {36, 1280, 20}}, {"gpt2-xl", {48, 1600, 25}}};
  const auto& s = sizes.at(a.model);
  a.n_layer = s[0];
  a.n_embd = s[1];
  a.n_head = s[2];
}

// The model states in dist::kModelStates' order, as the walkthrough's CSVs name them.
constexpr const char* kStateNames[] = {"param", "grad", "optim"};

// One stage's prediction at N ranks.
struct Prediction {
  std::array<int64_t, 3> after{};  // each model state's bytes after a step (dist::kModelStates' order)
  dist::StepPeaks peaks{};
  int64_t activations = 0;  // kept from forward to backward (and one block's recompute)
  int64_t wire = 0;         // bytes this rank sends per step
  std::vector<dist::ExpectedTraffic> traffic;
  int64_t states() const { return after[0] + after[1] + after[2]; }
  int64_t peak_total() const { return peaks.parameters + peaks.gradients + peaks.optimizer_states + peaks.comm + activations; }
};

Prediction predict(const Args& a, const nn::GPTConfig& cfg, ZeroStage st, int64_t N, dist::ElementBytes e) {
  const dist::PaddedUnits units = dist::gpt_padded_units(cfg, N);
  Prediction p;
  for (size_t i = 0; i < p.after.size(); ++i)
    p.after[i] = dist::model_state_bytes(st, dist::kModelStates[i], units.total(), N, e);
  p.peaks = dist::step_peaks_closed_form(st, units, N, a.prefetch, e);
  const dist::BlockActivations b = dist::block_activation_bytes(a.micro_batch, a.seq, cfg.n_embd, cfg.n_head, e.s);
  // K checkpoints blocks 0, K, 2K, ...: those keep their input, and one of them recomputes at a time.
  const int64_t ckpt = a.checkpoint_every > 0 ? (cfg.n_layer + a.checkpoint_every - 1) / a.checkpoint_every : 0;
  p.activations = ckpt * b.checkpointed + (cfg.n_layer - ckpt) * b.kept + (ckpt > 0 ? b.kept : 0);
  p.traffic =
      dist::traffic_closed_form(st, units.total(), static_cast<int64_t>(units.blocks.size()) + 1, N, e, a.grad_accum);
  for (const auto& t : p.traffic) p.wire += t.wire;
  return p;
}

// Bytes as GiB, or MiB below one GiB.
std::string gib(int64_t bytes) {
  constexpr double MiB = 1024.0 * 1024, GiB = 1024 * MiB;
  const double b = static_cast<double>(bytes);
  char buf[32];
  std::snprintf(buf, sizeof buf, b >= GiB ? "%.2f GiB" : "%.2f MiB", b / (b >= GiB ? GiB : MiB));
  return buf;
}

// The search's end: --n-layer's own limit.
constexpr int64_t kMaxLayers = int64_t{1} << 20;

// Whether every byte count of this model fits an int64 (with room: 2^62), parameters (16 bytes
// each at most, with Adam) and the blocks' activations (about 18 C s per token).
bool countable(const Args& a, int64_t n_layer) {
  const double C = static_cast<double>(a.n_embd), L = static_cast<double>(n_layer);
  const double params = L * (12 * C * C + 13 * C) + static_cast<double>(a.vocab + a.seq) * C;
  const double acts = static_cast<double>(a.micro_batch) * static_cast<double>(a.seq) * 18 * C * L * 4;
  return params * 16 <= 0x1p62 && acts <= 0x1p62;
}

// The largest n_layer at this width whose predicted peak fits `budget` bytes (0: not even one;
// kMaxLayers: at least that many).
int64_t largest_fit(const Args& a, nn::GPTConfig cfg, ZeroStage st, int64_t N, dist::ElementBytes e, double budget) {
  auto fits = [&](int64_t layers) {
    cfg.n_layer = layers;
    return static_cast<double>(predict(a, cfg, st, N, e).peak_total()) <= budget;
  };
  int64_t limit = kMaxLayers;  // the largest n_layer the counts hold
  while (limit > 1 && !countable(a, limit)) limit /= 2;
  if (!fits(1)) return 0;
  if (fits(limit)) return limit;
  int64_t lo = 1, hi = 2;
  while (hi < limit && fits(hi)) lo = hi, hi *= 2;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

void write_csvs(const Args& a, const nn::GPTConfig& cfg, int64_t N, dist::ElementBytes e) {
  const std::string dt = a.dtype, suffix = "_n" + std::to_string(N) + ".csv";
  std::ofstream mem(std::filesystem::path(a.out) / ("predict_memory" + suffix));
  std::ofstream traffic(std::filesystem::path(a.out) / ("predict_traffic" + suffix));
  if (!mem || !traffic) throw CLI::ValidationError("--out", "cannot write CSV files in '" + a.out + "'");
  mem << "n,dtype,stage,category,after,peak\n";
  traffic << "n,dtype,stage,collective,phase,calls,payload,wire\n";
  for (ZeroStage st : kStages) {
    const Prediction p = predict(a, cfg, st, N, e);
    const std::string s = dist::stage_name(st);
    const int64_t peaks[] = {p.peaks.parameters, p.peaks.gradients, p.peaks.optimizer_states};
    for (size_t i = 0; i < p.after.size(); ++i)
      mem << N << "," << dt << "," << s << "," << kStateNames[i] << "," << p.after[i] << "," << peaks[i] << "\n";
    mem << N << "," << dt << "," << s << ",comm,0," << p.peaks.comm << "\n";
    for (const auto& t : p.traffic)
      traffic << N << "," << dt << "," << s << "," << dist::collective_name(t.kind) << "," << dist::phase_name(t.phase)
              << "," << t.calls << "," << t.payload << "," << t.wire << "\n";
  }
}

std::string fixed4(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f", v);
  return buf;
}

// ZeRO-3's overlap of one block's collectives with the compute next to them (dist/zero/overlap_model.h).
void print_overlap(const Args& a, const nn::GPTConfig& cfg, int64_t N, dist::ElementBytes e) {
  const dist::PaddedUnits units = dist::gpt_padded_units(cfg, N);
  const int64_t block_bytes = units.blocks.at(0) * e.s, tokens = a.micro_batch * a.seq;
  const dist::LinkModel link{.latency_s = a.link_latency_us * 1e-6, .bytes_per_s = a.link_gbps * 1e9};
  // Blocks 0, K, 2K, ... recompute their forward in the backward (train_gpt's --activation-checkpointing K).
  const int64_t ckpt = a.checkpoint_every > 0 ? (cfg.n_layer + a.checkpoint_every - 1) / a.checkpoint_every : 0;
  auto overlap = [&](bool recompute) {
    return dist::block_overlap(block_bytes, tokens, a.seq, cfg.n_embd, N, a.tflops * 1e12, link, a.prefetch, recompute);
  };
  const dist::BlockOverlap o = overlap(ckpt > 0), plain = overlap(false);
  auto ms = [](double s) { return s * 1e3; };
  auto verdict = [&](double exposed) {
    return exposed > 0 ? detail::str("exposed: waits ", fixed4(ms(exposed)), " ms") : std::string("hidden");
  };
  std::printf("  zero3 overlap, per block (%s, %lld tokens per rank; %.3g TFLOP/s, %.3g GB/s, %.3g us; prefetch %d%s):\n",
              gib(block_bytes).c_str(), static_cast<long long>(tokens), a.tflops, a.link_gbps, a.link_latency_us,
              a.prefetch, ckpt > 0 ? "; a checkpointed block, with its recompute" : "");
  std::printf("    forward  %10.4f ms   all-gather                  %10.4f ms   %s\n",
              ms(o.forward_s), ms(o.gather_s), verdict(o.forward_exposed_s).c_str());
  std::printf("    backward %10.4f ms   all-gather + reduce-scatter %10.4f ms   %s\n",
              ms(o.backward_s), ms(o.gather_s + o.reduce_scatter_s), verdict(o.backward_exposed_s).c_str());
  // Each pass starts with the root unit (embeddings, final norm), with nothing to hide its gather under.
  const double root_gather = dist::ring_collective_seconds(units.root * e.s, N, link);
  const double L = static_cast<double>(cfg.n_layer), C = static_cast<double>(ckpt);
  const double exposed = C * (o.forward_exposed_s + o.backward_exposed_s) +
                         (L - C) * (plain.forward_exposed_s + plain.backward_exposed_s) + 2 * root_gather;
  const double compute = 3 * L * plain.forward_s + C * plain.forward_s;
  std::printf("    a micro-step waits %.4f ms for the link (the root's gathers %.4f ms of it) against %.4f ms of block "
              "compute; ",
              ms(exposed), ms(2 * root_gather), ms(compute));
  if (a.prefetch == 0) {
    std::printf("without prefetch every gather waits in full\n");
  } else {
    const double sequences = std::ceil(o.tokens_to_hide_forward / static_cast<double>(a.seq));
    std::printf("the forward hides the gather from %.0f tokens per rank (micro-batch %.0f)\n", o.tokens_to_hide_forward,
                std::max(1.0, sequences));
  }
}

// Where each stage's model states are with the offload asked for, and the disk traffic of a step.
void print_offload(const Args& a, const nn::GPTConfig& cfg, int64_t N, dist::ElementBytes e) {
  const dist::OffloadOptions o{.optimizer = dist::offload_target_from_name(a.offload_optimizer),
                               .params = dist::offload_target_from_name(a.offload_params)};
  if (!o.any_nvme()) return;
  const int64_t P = dist::gpt_padded_units(cfg, N).total();
  std::printf("  offload (optimizer %s, params %s), model states after a step, and the disk per step of %lld "
              "micro-step(s):\n",
              a.offload_optimizer.c_str(), a.offload_params.c_str(), static_cast<long long>(a.grad_accum));
  for (ZeroStage st : kStages) {
    if (o.params == dist::OffloadTarget::Nvme && st != ZeroStage::Three) continue;  // ZeRO-3's shards only
    int64_t states = 0, on_disk = 0;
    for (const auto& [cat, bytes] : dist::state_bytes_closed_form(st, P, N, e)) states += bytes;
    for (const auto& [cat, bytes] : dist::offloaded_bytes_closed_form(st, o, P, N, e)) on_disk += bytes;
    const dist::OffloadTraffic t = dist::offload_traffic_closed_form(st, o, P, N, e, a.grad_accum);
    std::printf("  %-7s in memory %12s   on disk %12s   reads %12s   writes %12s\n", dist::stage_name(st),
                gib(states - on_disk).c_str(), gib(on_disk).c_str(), gib(t.read).c_str(), gib(t.written).c_str());
  }
}

// Optimizer offload to cpu on a GPU (the host tier): per stage, the GPU's model states (the
// stage's closed form less its optimizer states), the host's (masters, moments and the exchange
// buffer), and the bytes each way per step: the reduced gradients down, the parameters up, each
// the exchange buffer's size.
void print_host_tier(const Args& a, const nn::GPTConfig& cfg, int64_t N, dist::ElementBytes e) {
  if (a.offload_optimizer != "cpu") return;
  const dist::OffloadOptions o{.optimizer = dist::OffloadTarget::Cpu};
  const int64_t P = dist::gpt_padded_units(cfg, N).total();
  std::printf("  optimizer offload to cpu on a GPU: model states after a step, and the bytes between host and GPU "
              "per step:\n");
  for (ZeroStage st : kStages) {
    int64_t gpu = 0, host = 0;
    for (const auto& [cat, bytes] : dist::state_bytes_closed_form(st, P, N, e))
      if (cat != MemoryCategory::OptimizerState) gpu += bytes;
    const auto on_host = dist::host_tier_bytes_closed_form(st, o, Device::cuda(), P, N, e);
    for (const auto& [cat, bytes] : on_host) host += bytes;
    std::printf("  %-7s on the GPU %12s   in host memory %12s   each way %12s\n", dist::stage_name(st), gib(gpu).c_str(),
                gib(host).c_str(), gib(on_host.at(MemoryCategory::GradientShard)).c_str());
  }
}

// Past one node: each layout's model states per rank and bytes per step within and across
// nodes (dist::traffic_closed_form on a RankLayout, the forms the tests check against the
// ledger), and with --tflops a step's time on the stated links. The time model: compute
// 6 Psi tokens / F (fwd + bwd) plus, with nothing overlapped, the bytes within the node over
// --intra-gbps and the bytes across over the node's --inter-gbps shared by its R ranks, plus a
// latency of log2(n) x --link-latency-us per collective over n ranks. With perfect overlap the step
// takes the larger of compute and communication; the truth lies between (the walkthrough's
// overlap chapter measures how much of ZeRO-3's traffic prefetch hides).
void print_cluster(const Args& a, const nn::GPTConfig& cfg, int64_t N, dist::ElementBytes e) {
  const int64_t R = a.ranks_per_node;
  if (N < R || N % R != 0) {
    std::printf("  (the cluster: N = %lld is not a whole number of nodes of %lld ranks)\n", static_cast<long long>(N),
                static_cast<long long>(R));
    return;
  }
  const dist::PaddedUnits units = dist::gpt_padded_units(cfg, N);
  std::vector<int64_t> sizes{units.root};
  sizes.insert(sizes.end(), units.blocks.begin(), units.blocks.end());
  struct Layout {
    const char* name;
    ZeroStage stage;
    dist::RankLayout layout;
  };
  const bool several = N > R;
  std::vector<Layout> layouts = {{"DDP", ZeroStage::DDP, {.N = N, .ranks_per_node = R}},
                                 {"ZeRO-3", ZeroStage::Three, {.N = N, .ranks_per_node = R}}};
  if (several) {
    layouts.push_back({"HSDP (ZeRO-3, K = R)", ZeroStage::Three, {.N = N, .shard_group = R, .ranks_per_node = R}});
    layouts.push_back({"ZeRO-3 + hpZ", ZeroStage::Three, {.N = N, .ranks_per_node = R, .secondary_partition = true}});
    layouts.push_back({"ZeRO++ (hpZ qwZ qgZ)", ZeroStage::Three,
                       {.N = N, .ranks_per_node = R, .secondary_partition = true, .quantize_weights = true,
                        .quantize_grads = true}});
  }
  const double tokens = static_cast<double>(a.micro_batch * a.seq);
  const double compute_s = a.tflops > 0 ? cfg.training_flops_per_token(a.seq) * tokens / (a.tflops * 1e12) : 0;
  std::printf("  past one node: %lld node(s) of %lld ranks; per rank and step (micro-step)%s\n",
              static_cast<long long>(N / R), static_cast<long long>(R),
              a.tflops > 0 ? detail::str("; step time on ", a.intra_gbps, " GB/s within a node per rank, ", a.inter_gbps,
                                         " GB/s per node across, ", a.link_latency_us, " us, ", a.tflops,
                                         " TFLOP/s: compute ", fixed4(compute_s * 1e3), " ms").c_str()
                           : "");
  std::printf("  %-22s %12s %12s %12s %12s%s\n", "layout", "states", "wire", "within node", "across", a.tflops > 0 ? "   step ms (no overlap .. full overlap)" : "");
  for (const Layout& l : layouts) {
    int64_t states = 0, wire = 0, inter = 0;
    for (const auto& [cat, bytes] : dist::state_bytes_closed_form(l.stage, units.total(), l.layout.K(), e)) states += bytes;
    double latency = 0;
    for (const dist::ExpectedTraffic& t : dist::traffic_closed_form(l.stage, sizes, l.layout, e, a.grad_accum)) {
      wire += t.wire;
      inter += t.inter_node;
      const double group = t.phase == dist::CommPhase::Other ? static_cast<double>(l.layout.K())
                           : t.inter_node > 0                 ? static_cast<double>(N)
                                                              : static_cast<double>(std::min(R, l.layout.K()));
      latency += static_cast<double>(t.calls) * std::log2(std::max(2.0, group)) * a.link_latency_us * 1e-6;
    }
    std::printf("  %-22s %12s %12s %12s %12s", l.name, gib(states).c_str(), gib(wire).c_str(), gib(wire - inter).c_str(),
                gib(inter).c_str());
    if (a.tflops > 0) {
      const double comm_s = static_cast<double>(wire - inter) / (a.intra_gbps * 1e9) +
                            static_cast<double>(inter) * static_cast<double>(R) / (a.inter_gbps * 1e9) + latency;
      std::printf("   %10.2f .. %-10.2f", (compute_s + comm_s) * 1e3, std::max(compute_s, comm_s) * 1e3);
    }
    std::printf("\n");
  }
}

void print_n(const Args& a, const nn::GPTConfig& cfg, int64_t N, dist::ElementBytes e) {
  const dist::PaddedUnits units = dist::gpt_padded_units(cfg, N);
  const int64_t psi = dist::gpt_padded_units(cfg, 1).total();
  std::printf("\nN = %lld: Psi = %lld parameters, P = %lld padded (%lld units)\n", static_cast<long long>(N),
              static_cast<long long>(psi), static_cast<long long>(units.total()),
              static_cast<long long>(units.blocks.size() + 1));
  std::printf("  %-7s %12s %12s %12s %12s %14s %14s %12s %14s\n", "stage", "param", "grad", "optim", "states",
              "activations", "step peak", "wire/step", "states vs DDP");
  for (ZeroStage st : kStages) {
    const Prediction p = predict(a, cfg, st, N, e);
    std::printf("  %-7s %12s %12s %12s %12s %14s %14s %12s %13.2fx\n", dist::stage_name(st), gib(p.after[0]).c_str(),
                gib(p.after[1]).c_str(), gib(p.after[2]).c_str(), gib(p.states()).c_str(), gib(p.activations).c_str(),
                gib(p.peak_total()).c_str(), gib(p.wire).c_str(), dist::memory_reduction(st, N, e));
  }
  if (a.memory_gib > 0) {
    const double budget = a.memory_gib * 1024.0 * 1024 * 1024;
    std::printf("  the largest n_layer whose step peak fits %.3g GiB (n_embd %lld):", a.memory_gib,
                static_cast<long long>(cfg.n_embd));
    for (ZeroStage st : kStages) {
      const int64_t L = largest_fit(a, cfg, st, N, e, budget);
      nn::GPTConfig c = cfg;
      c.n_layer = std::max<int64_t>(L, 1);
      const bool at_limit = L > 1 && !countable(a, 2 * L);  // the search stopped at its end, not at the budget
      std::printf("  %s %s%lld (%.3g parameters)", dist::stage_name(st), L == kMaxLayers || at_limit ? ">= " : "",
                  static_cast<long long>(L), L > 0 ? static_cast<double>(dist::gpt_padded_units(c, 1).total()) : 0.0);
    }
    std::printf("\n");
  }
  if (a.tflops > 0 && a.link_gbps > 0) print_overlap(a, cfg, N, e);
  print_offload(a, cfg, N, e);
  print_host_tier(a, cfg, N, e);
  if (a.ranks_per_node > 0) print_cluster(a, cfg, N, e);
  if (!a.out.empty()) write_csvs(a, cfg, N, e);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"zero_predict: per-rank memory and traffic of DDP and ZeRO-1/2/3 for any GPT at any N, from the closed forms"};
  app.add_option("--model", a.model, "GPT-2's sizes: gpt2, gpt2-medium, gpt2-large, gpt2-xl (sets --n-layer/--n-embd/--n-head)")
      ->check(CLI::IsMember({"gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"}));
  app.add_option("--n-layer", a.n_layer, "blocks L")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--n-embd", a.n_embd, "channels C")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--n-head", a.n_head, "attention heads")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--vocab", a.vocab, "vocabulary (wte's rows)")->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app.add_option("--vocab-multiple", a.vocab_multiple,
                 "as train_gpt's: wte's rows padded to a multiple of this (1: none; train_gpt pads GPT-2's 50257 to "
                 "50304 with 128 on llm.c shards)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--seq", a.seq, "context T (wpe's rows; the activations' sequence length)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--ranks", a.ranks, "world sizes N, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--dtype", a.dtype, "f32, or bf16 (mixed precision: K = 12)")->check(CLI::IsMember({"f32", "bf16"}));
  app.add_option("--micro-batch", a.micro_batch, "sequences per rank per micro-step (activations)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--activation-checkpointing", a.checkpoint_every,
                 "as train_gpt's: blocks 0, K, 2K, ... keep only their input (0: off; 1: every block)")
      ->check(CLI::Range(int64_t{0}, kMaxLayers));
  app.add_option("--prefetch", a.prefetch, "ZeRO-3 units gathered ahead")->check(CLI::Range(0, 64));
  app.add_option("--memory-gib", a.memory_gib,
                 "also find the largest n_layer whose estimated step peak fits this per rank (an estimate: measure "
                 "the largest with train_gpt --max-memory-per-rank)")
      ->check(CLI::Range(0.0, 1e9));
  app.add_option("--tflops", a.tflops, "the overlap model: TFLOP/s a rank computes at (with --link-gbps)")
      ->check(CLI::Range(1e-6, 1e6));
  app.add_option("--link-gbps", a.link_gbps, "the overlap model: each rank's link, GB/s one way")
      ->check(CLI::Range(1e-6, 1e6));
  app.add_option("--link-latency-us", a.link_latency_us, "the overlap model: latency per message, us (default 5)")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--offload-optimizer", a.offload_optimizer,
                 "Adam's states and the f32 masters: none, nvme (CPU ranks) or cpu (host memory, from a GPU)")
      ->check(CLI::IsMember({"none", "nvme", "cpu"}));
  app.add_option("--offload-params", a.offload_params, "ZeRO-3's parameter shards: none or nvme (ZeRO-3 rows only)")
      ->check(CLI::IsMember({"none", "nvme"}));
  app.add_option("--grad-accum", a.grad_accum,
                 "micro-steps per step: each repeats ZeRO-3's gathers and the gradient reduction (train_gpt's "
                 "default exact reduction), and the offloaded shards' reads")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--ranks-per-node", a.ranks_per_node,
                 "the cluster: ranks per node R; adds, per N, each layout's (DDP, ZeRO-3, HSDP, hpZ, ZeRO++) bytes "
                 "within and across nodes (docs/multinode.md)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--intra-gbps", a.intra_gbps, "the cluster's step time: GB/s one way per rank within a node (with --tflops)")
      ->check(CLI::PositiveNumber);
  app.add_option("--inter-gbps", a.inter_gbps, "the cluster's step time: GB/s one way per node across nodes (with --tflops)")
      ->check(CLI::PositiveNumber);
  app.add_option("--out", a.out, "a directory for predict_memory_n<N>.csv and predict_traffic_n<N>.csv")
      ->check(CLI::ExistingDirectory);
  if (std::optional<int> code = io::check_invocation("zero_predict", app, argc, argv)) return *code;
  try {
    if (!a.model.empty()) {
      for (const char* f : {"--n-layer", "--n-embd", "--n-head"})
        if (app.count(f) > 0) throw CLI::ValidationError(f, "--model sets it; give one or the other");
      apply_model(a);
    }
    const bool cluster_time = a.intra_gbps > 0 || a.inter_gbps > 0;
    if (cluster_time && (a.ranks_per_node == 0 || a.intra_gbps == 0 || a.inter_gbps == 0 || a.tflops == 0))
      throw CLI::ValidationError("--intra-gbps", "the cluster's step time needs --ranks-per-node, --intra-gbps, "
                                                 "--inter-gbps and --tflops");
    if (a.tflops > 0 && a.link_gbps == 0 && !cluster_time)
      throw CLI::ValidationError("--tflops", "the overlap model needs both --tflops and --link-gbps (positive)");
    if (a.link_gbps > 0 && a.tflops == 0)
      throw CLI::ValidationError("--tflops", "the overlap model needs both --tflops and --link-gbps (positive)");
    if (app.count("--link-latency-us") > 0 && a.tflops == 0)
      throw CLI::ValidationError("--link-latency-us", "applies to the overlap model: give --tflops and --link-gbps");
    if (a.offload_optimizer == "cpu" && a.offload_params != "none")
      throw CLI::ValidationError("--offload-params", "NVMe offload runs on CPU ranks; --offload-optimizer cpu is a "
                                                     "GPU's: predict them one at a time");
    if (a.checkpoint_every > a.n_layer)  // as train_gpt refuses it
      throw CLI::ValidationError("--activation-checkpointing", detail::str(a.checkpoint_every, " exceeds n_layer ",
                                                                           a.n_layer, ": only block 0 would checkpoint"));
    // Every byte count below is an int64: refuse a model whose counts would not fit one.
    if (!countable(a, a.n_layer))
      throw CLI::ValidationError("the model", "its byte counts exceed 2^62: give a smaller one");
    std::vector<int64_t> ranks;  // each N once, in the order given
    for (int64_t n : a.ranks)
      if (std::find(ranks.begin(), ranks.end(), n) == ranks.end()) ranks.push_back(n);
    a.ranks = ranks;
    if (a.n_embd % a.n_head != 0)
      throw CLI::ValidationError("--n-embd", "n_embd " + std::to_string(a.n_embd) + " must be a multiple of n_head " +
                                                 std::to_string(a.n_head));
    const int64_t padded_vocab = data::padded_vocab(a.vocab, a.vocab_multiple);  // as train_gpt pads it
    const nn::GPTConfig cfg{.vocab_size = a.vocab, .padded_vocab_size = padded_vocab, .block_size = a.seq,
                            .n_layer = a.n_layer, .n_head = a.n_head, .n_embd = a.n_embd};
    const dist::ElementBytes e = dist::ElementBytes::of(a.dtype == "bf16" ? DType::BF16 : DType::F32);
    std::printf("GPT: n_layer %lld, n_embd %lld, n_head %lld, vocab %lld%s, seq %lld; %s (s = %lld, K = %lld); "
                "micro-batch %lld%s; per rank\n",
                static_cast<long long>(a.n_layer), static_cast<long long>(a.n_embd), static_cast<long long>(a.n_head),
                static_cast<long long>(a.vocab),
                padded_vocab != a.vocab ? (" (padded to " + std::to_string(padded_vocab) + ")").c_str() : "",
                static_cast<long long>(a.seq), a.dtype.c_str(),
                static_cast<long long>(e.s), static_cast<long long>(e.k), static_cast<long long>(a.micro_batch),
                a.checkpoint_every > 0 ? (", activation checkpointing every " + std::to_string(a.checkpoint_every) +
                                          (a.checkpoint_every == 1 ? " block" : " blocks")).c_str()
                                       : "");
    for (int64_t N : a.ranks) print_n(a, cfg, N, e);
    const double s = static_cast<double>(e.s), k = static_cast<double>(e.k);
    std::printf("\nAs N grows, model states per rank fall by at most (2s+K)/(2s) = %.0fx (ZeRO-1), (2s+K)/s = %.0fx "
                "(ZeRO-2), and N (ZeRO-3).\n",
                (2 * s + k) / (2 * s), (2 * s + k) / s);
  } catch (const CLI::ParseError& e) {  // the checks above, worded as CLI11's
    std::fprintf(stderr, "zero_predict: %s (see --help)\n", e.what());
    return 2;
  }
  return 0;
}

#include "examples/zero_walkthrough/cap_experiment.h"

#include "dist/offload/disk_bandwidth.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <string>
#include <vector>

namespace zdl::walkthrough {

namespace {

// The fit CSV's offload column: "none", "optimizer" or "optimizer+params" (on NVMe).
std::string offload_name(const dist::OffloadOptions& o) {
  if (!o.any_nvme()) return "none";
  return o.params == dist::OffloadTarget::Nvme ? "optimizer+params" : "optimizer";
}

// One stage's search for the largest n_layer under the cap.
struct CapFit {
  std::array<int64_t, 3> peaks{};  // uncapped 1-step peaks at L = 2, 3, 4
  int64_t predicted = 0;           // L* from peak(L) = a + b L
  int64_t layers = 0;              // L* measured: trains under the cap (0: not even L = 1)
  CapProbe at;                     // the run at L* (or where the walk down stopped, if nothing trained)
};

// L* from three uncapped runs: the slope of the last two (at small L the peak can sit in another
// phase of the step, the head's).
int64_t predict_layers(CapFit& f, Report& rep, const Args& a, Walkthrough& w, ZeroStage st, bool ckpt,
                       const dist::OffloadOptions& off, int64_t cap, Csv& fit_csv) {
  for (int i = 0; i < 3; ++i) {
    auto p = w.probe(st, 2 + i, 0, 1, ckpt, off);
    f.peaks[i] = p.peak;
    fit_csv.row(rep.N, dtype_name(rep.dtype), dist::stage_name(st), ckpt ? 1 : 0, offload_name(off), cap, 2 + i,
                p.params, p.peak, p.peak <= cap ? 1 : 0, "uncapped");
  }
  const int64_t b = std::max<int64_t>(f.peaks[2] - f.peaks[1], 1);
  const int64_t L = f.peaks[2] <= cap ? 4 + (cap - f.peaks[2]) / b : f.peaks[0] <= cap ? 2 : 1;
  return std::min(L, a.fit_max_layers);
}

// Predicts L*, then walks from it under the cap: down until a size trains, up until the next one
// runs out of memory (the peak is not exactly affine).
CapFit fit_under_cap(Report& rep, const Args& a, Walkthrough& w, ZeroStage st, bool ckpt,
                     const dist::OffloadOptions& off, int64_t cap, Csv& fit_csv) {
  CapFit f;
  int64_t L = f.predicted = predict_layers(f, rep, a, w, st, ckpt, off, cap, fit_csv);
  auto check = [&](int64_t layers) {
    if (layers < 1) return CapProbe{};
    auto p = w.probe(st, layers, cap, 2, ckpt, off);
    if (!p.all_ranks_agree)
      rep.fail(detail::str(dist::stage_title(st), " L=", layers, ": not every rank ran out of memory"));
    fit_csv.row(rep.N, dtype_name(rep.dtype), dist::stage_name(st), ckpt ? 1 : 0, offload_name(off), cap, layers,
                p.params, p.peak, p.fits ? 1 : 0, p.fits ? "trained under cap" : "out of memory under cap");
    return p;
  };
  f.at = check(L);
  while (L >= 1 && !f.at.fits) f.at = check(--L);
  if (L < a.fit_max_layers) {
    auto next = check(L + 1);
    while (next.fits && L + 1 < a.fit_max_layers) {
      ++L;
      f.at = next;
      next = check(L + 1);
    }
    if (next.fits) ++L, f.at = next;
  }
  f.layers = L;
  return f;
}

// The experiment of the doc: DDP on the model ZeRO-3 trains under this cap.
void compare_on_zero3_model(Report& rep, const Args& a, Walkthrough& w, int64_t layers, int64_t cap) {
  auto ddp = w.probe(ZeroStage::DDP, layers, cap, 2, false);
  auto z3 = w.probe(ZeroStage::Three, layers, cap, 2, false);
  rep.say(detail::str("\n    The same model (L=", layers, ", ", commas(z3.params), " parameters) under a ", a.cap_mib,
                      " MiB cap per rank:"));
  rep.say(detail::str("    DDP:    ", ddp.fits ? "trained (unexpected)" : "out of memory on every rank: " + ddp.error));
  if (rep.lead && z3.fits)
    std::printf("    ZeRO-3: trained 2 steps, losses %.6f %.6f, peak %s MiB per rank\n", z3.losses[0], z3.losses[1],
                mib(z3.peak).c_str());
  if (ddp.fits || !z3.fits) rep.fail("memory cap: expected DDP out of memory and ZeRO-3 training");
}

// ZeRO-3 with its optimizer states, then its parameter shards too, in files under --offload-dir
// (docs/offload.md): the same search. What stays in memory per block is then its gradient shard
// (s Psi_u / N) and, while it computes, its gathered parameters and gradients and its
// activations; the optimizer step brings at most three units' states back at once.
void offload_rows(Report& rep, const Args& a, Walkthrough& w, int64_t cap, const std::array<CapFit, 2>& zero3,
                  Csv& fit_csv) {
  rep.say("\n    ZeRO-3 with offload to NVMe (files under --offload-dir): the same search. Psi below is the largest");
  rep.say("    model's parameter count; 'x ZeRO-3' compares it with ZeRO-3 alone under the same checkpointing.");
  for (bool ckpt : {false, true}) {
    const CapFit& plain = zero3[ckpt ? 1 : 0];
    for (bool params : {false, true}) {
      const dist::OffloadOptions off{.optimizer = dist::OffloadTarget::Nvme,
                                     .params = params ? dist::OffloadTarget::Nvme : dist::OffloadTarget::None,
                                     .dir = a.offload_dir};
      const CapFit f = fit_under_cap(rep, a, w, ZeroStage::Three, ckpt, off, cap, fit_csv);
      const double ratio = plain.at.params > 0 ? static_cast<double>(f.at.params) / static_cast<double>(plain.at.params) : 0;
      if (rep.lead)
        std::printf("    ZeRO-3 + %-17s %-13s measured L* = %lld%s (%s params, %.2fx ZeRO-3's %s)\n",
                    offload_name(off).c_str(), ckpt ? "checkpointed" : "", static_cast<long long>(f.layers),
                    f.layers >= a.fit_max_layers ? " (the search's limit)" : "", commas(f.at.params).c_str(), ratio,
                    commas(plain.at.params).c_str());
    }
  }
}

// What a step with offload moves and costs, on the largest model ZeRO-3 with checkpointing trains
// under the cap (uncapped here, four steps; the medians of the last three): each step's bytes to
// and from the disk, which must equal the closed form (dist::offload_traffic_closed_form); the time
// those bytes take at the bandwidth the disk gives now (measured through the same store, every
// rank at once); and the step next to the same step without offload. The window row holds every
// unit's optimizer states (dist/offload/optimizer_window.h).
void offload_cost(Report& rep, const Args& a, Walkthrough& w, int64_t layers) {
  if (layers < 1) return;
  const dist::OffloadOptions opt{.optimizer = dist::OffloadTarget::Nvme, .dir = a.offload_dir};
  dist::OffloadOptions both = opt, window = opt;
  both.params = window.params = dist::OffloadTarget::Nvme;
  window.window_bytes = int64_t{1} << 40;
  const std::vector<std::pair<std::string, dist::OffloadOptions>> modes = {
      {"none", {}}, {"optimizer", opt}, {"optimizer+params", both}, {"optimizer+params, window", window}};
  const int64_t padded = dist::gpt_padded_units(gpt_config(a, layers), rep.N).total();
  struct Row {
    int64_t read = 0, written = 0;
    double ms = 0;
  };
  std::vector<Row> rows;
  for (const auto& [name, off] : modes) {
    const CapProbe p = w.probe(ZeroStage::Three, layers, /*cap=*/0, 4, /*checkpointed=*/true, off);
    if (!p.fits) rep.fail(detail::str("offload cost, ", name, ": ", p.error));
    std::vector<double> ms(p.step_ms.begin() + 1, p.step_ms.end());
    std::sort(ms.begin(), ms.end());
    Row r{.ms = ms[ms.size() / 2]};
    if (!p.disk.empty()) {
      r.read = p.disk.back().first;
      r.written = p.disk.back().second;
      const dist::OffloadTraffic want = dist::offload_traffic_closed_form(ZeroStage::Three, off, padded, rep.N,
                                                                         dist::ElementBytes::of(rep.dtype), 1);
      for (size_t s = 1; s < p.disk.size(); ++s)
        // With the window the first units' gathers of a step find their shards still in memory
        // from the last step's writes (parameter offload), and read less.
        if ((off.window_bytes > 0 ? p.disk[s].first > want.read : p.disk[s].first != want.read) ||
            p.disk[s].second != want.written)
          rep.fail(detail::str("offload cost, ", name, ", step ", s + 1, ": read ", p.disk[s].first, " and wrote ",
                               p.disk[s].second, " bytes; the closed form says ", want.read, " and ", want.written));
    }
    rows.push_back(r);
  }
  const dist::DiskBandwidth bw =
      dist::measure_disk_bandwidth(a.offload_dir, "[walkthrough]", std::max(rows[2].read, rows[2].written), true);
  if (!rep.lead) return;
  std::printf("\n    What a step moves and costs with offload: ZeRO-3 with checkpointing at L = %lld (%s params), no cap,\n",
              static_cast<long long>(layers), commas(static_cast<int64_t>(gpt_config(a, layers).num_parameters())).c_str());
  std::printf("    the median of steps 2-4. The disk now gives %.2f GB/s written, %.2f GB/s read per rank (all ranks at\n",
              bw.write_gbs, bw.read_gbs);
  std::printf("    once, through the offload store); 'at disk speed' is the step's bytes at those rates.\n");
  std::printf("    %-26s %12s %12s %14s %10s %9s\n", "offload", "read/step", "written/step", "at disk speed", "step ms",
              "vs none");
  for (size_t i = 0; i < rows.size(); ++i)
    std::printf("    %-26s %8s MiB %8s MiB %11.1f ms %10.1f %8.2fx\n", modes[i].first.c_str(), mib(rows[i].read).c_str(),
                mib(rows[i].written).c_str(), 1000.0 * bw.seconds(rows[i].read, rows[i].written), rows[i].ms,
                rows[i].ms / rows[0].ms);
  std::printf("    Bytes per step equal dist::offload_traffic_closed_form (checked here, every step). The window moves\n"
              "    them under the backward and the next forward instead of in the optimizer step; with parameter\n"
              "    offload it reads a little less, as the first gathers of a step find their shards still in memory.\n");
}

}  // namespace

void run_cap_experiment(Report& rep, const Args& a, Walkthrough& w) {
  const int64_t cap = static_cast<int64_t>(a.cap_mib * 1024 * 1024);
  rep.say(detail::str("\n[4] Memory cap: ", a.cap_mib,
                      " MiB per rank (all categories). Largest n_layer that trains, per stage, without and with"));
  rep.say("    activation checkpointing of every block (C, T, batch as above). Peaks of uncapped 1-step runs at");
  rep.say("    L = 2, 3, 4 give peak(L) = a + b L (b from L = 3, 4); L* is predicted from it and confirmed under the");
  rep.say("    cap: L* trains 2 steps, L*+1 runs out of memory. b is what one more block costs at the peak: its model");
  rep.say("    states and its activations (checkpointed: its input only).");
  rep.say(table_rule());
  Csv fit_csv = rep.csv("fit", "n,dtype,stage,checkpoint,offload,cap,n_layer,params,peak,fits,how");
  int64_t ddp_L = 0, zero3_L = 0;
  std::array<CapFit, 2> zero3;  // without and with checkpointing: the offload rows' reference
  for (ZeroStage st : kStages)
    for (bool ckpt : {false, true}) {
      const CapFit f = fit_under_cap(rep, a, w, st, ckpt, {}, cap, fit_csv);
      if (st == ZeroStage::Three) zero3[ckpt ? 1 : 0] = f;
      const int64_t L = f.layers;
      if (st == ZeroStage::DDP && !ckpt) ddp_L = L;
      if (st == ZeroStage::Three && !ckpt) zero3_L = L;
      const bool affine = f.peaks[2] - f.peaks[1] == f.peaks[1] - f.peaks[0];
      if (rep.lead)
        std::printf("    %-7s %-13s peak(L=2,3,4) = %s, %s, %s MiB (%s, b = %s MiB); predicted L* = %lld; "
                    "measured L* = %lld%s (%s params)\n",
                    dist::stage_title(st), ckpt ? "checkpointed" : "", mib(f.peaks[0]).c_str(), mib(f.peaks[1]).c_str(),
                    mib(f.peaks[2]).c_str(), affine ? "affine" : "not affine", mib(f.peaks[2] - f.peaks[1]).c_str(),
                    static_cast<long long>(f.predicted), static_cast<long long>(L),
                    L >= a.fit_max_layers ? " (the search's limit)" : "", L >= 1 ? commas(f.at.params).c_str() : "0");
    }
  if (zero3_L > ddp_L) compare_on_zero3_model(rep, a, w, zero3_L, cap);
  if (!a.offload_dir.empty()) {
    offload_rows(rep, a, w, cap, zero3, fit_csv);
    offload_cost(rep, a, w, zero3[1].layers);
  }
}

}  // namespace zdl::walkthrough

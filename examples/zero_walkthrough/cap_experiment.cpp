#include "examples/zero_walkthrough/cap_experiment.h"

#include <algorithm>
#include <array>
#include <cstdio>

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
  if (!a.offload_dir.empty()) offload_rows(rep, a, w, cap, zero3, fit_csv);
}

}  // namespace zdl::walkthrough

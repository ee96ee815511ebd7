#include "examples/zero_walkthrough/tables.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>

#include "dist/zero/closed_forms.h"

namespace zdl::walkthrough {

using dist::CommPhase;
using dist::ModelState;

namespace {

// The model state a category holds; none for activations and communication buffers.
std::optional<ModelState> state_of(Cat c) {
  switch (c) {
    case kParam: return ModelState::Parameters;
    case kGrad: return ModelState::Gradients;
    case kOptim: return ModelState::OptimizerStates;
    default: return std::nullopt;
  }
}

// A category's peak during a step by the schedule's closed form; -1: none (activations).
int64_t peak_closed_form(const StageRun& r, Cat c, int N, dist::ElementBytes e) {
  const dist::StepPeaks p = dist::step_peaks_closed_form(r.stage, r.padded_units, N, r.prefetch, e);
  switch (c) {
    case kParam: return p.parameters;
    case kGrad: return p.gradients;
    case kOptim: return p.optimizer_states;
    case kComm: return p.comm;
    default: return -1;
  }
}

// One stage's rows of table [1]: a category a row, then the total.
void print_memory_rows(Report& rep, const StageRun& r, int64_t psi, int64_t P, Csv& csv) {
  const int N = rep.N;
  const dist::ElementBytes eb = rep.eb;
  const char* title = dist::stage_title(r.stage);
  for (int c = 0; c < kNumCats; ++c) {
    const Cat cat = static_cast<Cat>(c);
    const std::optional<ModelState> m = state_of(cat);
    const double paper = m ? dist::model_state_bytes(r.stage, *m, static_cast<double>(psi), N, eb) : 0.0;
    const int64_t want = m ? dist::model_state_bytes(r.stage, *m, P, N, eb) : 0;
    const std::string formula = m ? dist::model_state_formula(r.stage, *m, eb) : "-";
    const bool ok = r.after[c] == want;
    if (!ok) rep.fail(detail::str(title, " ", kCatNames[c], ": measured ", r.after[c], " bytes after the step, closed form ", want));
    const int64_t want_peak = peak_closed_form(r, cat, N, eb);
    const bool peak_ok = want_peak < 0 || r.peak[c] == want_peak;
    if (!peak_ok)
      rep.fail(detail::str(title, " ", kCatNames[c], ": measured peak ", r.peak[c], " bytes, schedule's closed form ", want_peak));
    if (rep.lead)
      std::printf("    %-7s %-10s %14s  %-18s %14s %8s  %-4s %14s %14s %-3s\n", title, kCatNames[c],
                  commas(r.after[c]).c_str(), formula.c_str(), commas(std::llround(paper)).c_str(),
                  commas(want - std::llround(paper)).c_str(), ok ? "yes" : "NO", commas(r.peak[c]).c_str(),
                  want_peak < 0 ? "-" : commas(want_peak).c_str(), want_peak < 0 ? "" : peak_ok ? "yes" : "NO");
    csv.row(N, dtype_name(rep.dtype), dist::stage_name(r.stage), kCatNames[c], r.after[c], r.peak[c], want, paper,
            formula, want_peak, psi, P);
  }
  const int64_t tot_want = dist::model_states_bytes(r.stage, P, N, eb);
  const double tot_paper = dist::model_states_bytes(r.stage, static_cast<double>(psi), N, eb);
  const std::string tot_formula = dist::model_states_formula(r.stage, eb);
  if (rep.lead)
    std::printf("    %-7s %-10s %14s  %-18s %14s %8s  %-4s %14s  (%s MiB after, %s MiB peak)\n", "", "total",
                commas(r.total_after).c_str(), tot_formula.c_str(), commas(std::llround(tot_paper)).c_str(),
                commas(tot_want - std::llround(tot_paper)).c_str(), r.total_after == tot_want ? "yes" : "NO",
                commas(r.total_peak).c_str(), mib(r.total_after).c_str(), mib(r.total_peak).c_str());
  csv.row(N, dtype_name(rep.dtype), dist::stage_name(r.stage), "total", r.total_after, r.total_peak, tot_want, tot_paper,
          tot_formula, -1, psi, P);
  if (r.total_after != tot_want)
    rep.fail(detail::str(title, ": ", r.total_after, " bytes remain after the step, closed form ", tot_want,
                         " (something besides the model states stayed allocated)"));
  if (!r.same_on_all_ranks) rep.fail(detail::str(title, ": ranks measured different memory"));
}

int64_t model_state_after(const StageRun& r) { return r.after[kParam] + r.after[kGrad] + r.after[kOptim]; }

// One stage's rows of table [2] (its last step), and the checks of every step.
void print_traffic_rows(Report& rep, const StageRun& r, int64_t P, int64_t units, Csv& csv) {
  const int N = rep.N;
  const char* title = dist::stage_title(r.stage);
  const auto want = dist::traffic_closed_form(r.stage, P, units, N, rep.eb);
  int64_t model_wire = 0;
  for (size_t s = 0; s < r.traffic.size(); ++s) {
    const Traffic& t = r.traffic[s];
    int64_t counted_calls = 0, all_calls = 0;
    for (auto& w : want) {
      const auto& got = t[static_cast<int>(w.kind)][static_cast<int>(w.phase)];
      counted_calls += got.calls;
      const bool ok = got.calls == w.calls && got.payload_bytes == w.payload && got.wire_bytes == w.wire;
      if (!ok)
        rep.fail(detail::str(title, " step ", s + 1, " ", dist::collective_name(w.kind), "/", dist::phase_name(w.phase),
                             ": measured ", got.calls, " calls, ", got.payload_bytes, " B payload, ", got.wire_bytes,
                             " B wire; closed form ", w.calls, ", ", w.payload, ", ", w.wire));
      if (s + 1 != r.traffic.size()) continue;
      if (w.phase != CommPhase::Other) model_wire += got.wire_bytes;
      const std::string label = detail::str(dist::collective_name(w.kind), " / ", dist::phase_name(w.phase));
      if (rep.lead)
        std::printf("    %-7s %-32s %5lld %14s %14s %14s  %-17s %-3s\n", title, label.c_str(),
                    static_cast<long long>(got.calls), commas(got.payload_bytes).c_str(), commas(got.wire_bytes).c_str(),
                    commas(w.wire).c_str(), w.formula.c_str(), ok ? "yes" : "NO");
      csv.row(N, dtype_name(rep.dtype), dist::stage_name(r.stage), dist::collective_name(w.kind),
              dist::phase_name(w.phase), got.calls, got.payload_bytes, got.wire_bytes, w.calls, w.payload, w.wire, w.formula);
    }
    for (auto& kind : t)  // the step's loss, shared for the report, is no model traffic
      for (int ph = 0; ph < dist::kNumCommPhases; ++ph)
        if (static_cast<CommPhase>(ph) != CommPhase::Metrics) all_calls += kind[static_cast<size_t>(ph)].calls;
    if (all_calls != counted_calls)
      rep.fail(detail::str(title, " step ", s + 1, ": ", all_calls - counted_calls, " collectives beyond the closed form"));
  }
  if (!rep.lead) return;
  const double volume = static_cast<double>(dist::model_volume_wire_bytes(P, N, rep.eb));
  std::printf("    %-7s model bytes on the wire: %s = %s x s P (N-1)/N   (paper: %lld Psi)\n", "", commas(model_wire).c_str(),
              N > 1 ? detail::str(model_wire / volume).c_str() : "-",
              static_cast<long long>(dist::model_volumes_per_step(r.stage)));
}

// ZeRO-3's time blocked on all-gathers in the traced step: from a unit's pre-hook (our marker,
// which runs just before the manager's) to the end of the wait for that unit's parameters; of
// it, the divergence checks' rendezvous (sync_begin -> sync_end: waiting for the other ranks to
// reach the collective) and the rest (waiting for the bytes).
struct Blocked {
  double total = 0, ranks = 0;
  double data() const { return total - ranks; }
};
Blocked blocked_ms(const StageRun& r) {
  Blocked b;
  double entered = -1, sync = -1, ranks = 0;
  for (const Sample& x : r.trace) {
    if (x.event == "forward_hook" || x.event == "backward_hook") entered = x.t_ms, ranks = 0;
    if (x.event == "sync_begin") sync = x.t_ms;
    if (x.event == "sync_end" && sync >= 0) ranks += x.t_ms - sync, sync = -1;
    if (x.event == "gather_done" && entered >= 0) b.total += x.t_ms - entered, b.ranks += ranks, ranks = 0;
    if (x.event == "forward_begin" || x.event == "backward_begin") entered = -1, ranks = 0;
  }
  return b;
}

// Activation bytes (with workspace) on this rank when the traced step's loss was computed: what
// the forward keeps for the backward, besides the model states.
int64_t kept_after_forward(const StageRun& r) {
  for (const Sample& x : r.trace)
    if (x.event == "loss_computed") return x.mem[kAct];
  return -1;
}

// Whether two runs issued the same collectives (calls and payloads, every step; the loss's share aside).
bool same_collectives(const StageRun& p, const StageRun& c) {
  if (p.traffic.size() != c.traffic.size()) return false;
  for (size_t s = 0; s < p.traffic.size(); ++s)
    for (int k = 0; k < dist::kNumCollectiveKinds; ++k)
      for (int ph = 0; ph < dist::kNumCommPhases; ++ph) {
        const auto &x = p.traffic[s][k][ph], &y = c.traffic[s][k][ph];
        if (static_cast<CommPhase>(ph) != CommPhase::Metrics && (x.calls != y.calls || x.payload_bytes != y.payload_bytes))
          return false;
      }
  return true;
}

std::string fixed1(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

// Prefetch waits less for gathers by construction; where its step still measures slower, say why
// rather than let the table teach the opposite.
void warn_if_prefetch_measured_slower(Report& rep, std::span<const StageRun> runs) {
  const StageRun *with = nullptr, *without = nullptr;
  for (auto& r : runs)
    if (r.stage == ZeroStage::Three) (r.prefetch > 0 ? with : without) = &r;
  if (!with || !without || median_step_ms(*with) <= median_step_ms(*without)) return;
  const auto [lo, hi] = step_ms_range(*without);
  rep.say(detail::str(
      "    note: ZeRO-3 with prefetch measured slower than without (", fixed1(median_step_ms(*with)), " vs ",
      fixed1(median_step_ms(*without)), " ms, the latter ranging ", fixed1(lo), "-", fixed1(hi),
      " ms) though it blocked\n    less on all-gathers (", fixed1(blocked_ms(*with).total), " vs ",
      fixed1(blocked_ms(*without).total), " ms). Where ranks share cores, the communication threads that now run under "
      "the compute\n    slow it down, and a median of a few steps moves by more than the difference: read the blocked "
      "time, not this ratio."));
}

}  // namespace

void print_sizes(Report& rep, const Args& a, const StageRun& r) {
  const int64_t psi = r.psi, P = r.padded, units = r.units;
  const auto gpt2 = static_cast<int64_t>(gpt_config(a, a.n_layer).num_parameters());
  if (psi != gpt2) rep.fail(detail::str("the model has ", psi, " parameters, the GPT-2 count says ", gpt2));
  rep.say(detail::str("\nPsi = ", commas(psi), " parameters in ", units, " units (", units - 1,
                      " blocks + the root: embeddings, final norm); padded to multiples of N: P = ", commas(P), " (+",
                      P - psi, " elements)"));
  rep.say(detail::str("element bytes: parameters and gradients s = ", rep.eb.s, " (", dtype_name(rep.dtype),
                      "), optimizer states K = ", rep.eb.k,
                      rep.dtype == DType::BF16 ? " (f32 master 4 + Adam m 4 + v 4: the paper's mixed precision)"
                                               : " (Adam m 4 + v 4; the f32 parameters are their own master)"));
}

void print_memory_table(Report& rep, std::span<const StageRun> stages) {
  const int64_t psi = stages[0].psi, P = stages[0].padded;  // the same model in every stage
  rep.say("\n[1] Memory per rank (bytes). 'after' = after the last step (model states stay, the rest is freed);");
  rep.say("    'formula' = the paper's closed form at Psi, 'pad' = what the padding to P adds, 'peak' = highest");
  rep.say("    during the step (per category), 'schedule' = its closed form for this implementation's unit schedule");
  rep.say("    (ZeRO-3: root + the working unit + the prefetched one; activations are measured only).");
  rep.say(table_rule());
  if (rep.lead)
    std::printf("    %-7s %-10s %14s  %-18s %14s %8s  %-4s %14s %14s %-3s\n", "stage", "category", "after", "formula",
                "= bytes", "+ pad", "ok", "peak", "schedule", "ok");
  Csv csv = rep.csv("memory", "n,dtype,stage,category,after,peak,closed_form,paper,formula,peak_closed_form,psi,padded");
  for (auto& r : stages) print_memory_rows(rep, r, psi, P, csv);
  if (!rep.lead) return;
  std::printf("    model states vs DDP:");
  for (auto& r : stages)
    std::printf("  %s %.2fx", dist::stage_title(r.stage),
                static_cast<double>(model_state_after(stages[0])) / static_cast<double>(model_state_after(r)));
  std::printf("   (the paper at N=%d: DDP 1x, ZeRO-1 %.2fx, ZeRO-2 %.2fx, ZeRO-3 %.2fx)\n", rep.N,
              dist::memory_reduction(ZeroStage::One, rep.N, rep.eb), dist::memory_reduction(ZeroStage::Two, rep.N, rep.eb),
              dist::memory_reduction(ZeroStage::Three, rep.N, rep.eb));
}

void print_traffic_table(Report& rep, std::span<const StageRun> stages) {
  const int64_t P = stages[0].padded, units = stages[0].units;  // the same model in every stage
  rep.say("\n[2] Bytes per rank per step by collective and phase (every step; the last one shown).");
  rep.say("    payload = the collective's full buffer; wire = what this rank sends on a ring.");
  rep.say(table_rule());
  if (rep.lead)
    std::printf("    %-7s %-32s %5s %14s %14s %14s  %-17s %-3s\n", "stage", "collective / phase", "calls", "payload",
                "wire", "= closed form", "formula", "ok");
  Csv csv = rep.csv("traffic", "n,dtype,stage,collective,phase,calls,payload,wire,closed_calls,closed_payload,closed_wire,formula");
  for (auto& r : stages) print_traffic_rows(rep, r, P, units, csv);
}

void print_step_table(Report& rep, const Args& a, std::span<const StageRun> runs) {
  const double loss_tol = a.loss_tol;
  rep.say("\n[3] Step time (median of the steps after the first, and their range) and losses (mean over ranks).");
  rep.say(table_rule());
  Csv csv = rep.csv("steps", "n,dtype,stage,prefetch,step,loss,ms");
  const StageRun& ddp = runs[0];
  const double ddp_ms = median_step_ms(ddp);
  for (auto& r : runs) {
    const double m = median_step_ms(r);
    std::string name = dist::stage_title(r.stage);
    if (r.stage == ZeroStage::Three) name += detail::str(" (prefetch ", r.prefetch, ")");
    if (rep.lead) {
      const auto [lo, hi] = step_ms_range(r);
      std::printf("    %-20s %8.1f ms (%.1f-%.1f)  %6.2fx DDP  %8.0f tokens/s  losses", name.c_str(), m, lo, hi,
                  m / ddp_ms, static_cast<double>(a.batch * a.seq) / (m / 1000.0));
      for (double l : r.losses) std::printf(" %.6f", l);
      if (r.stage == ZeroStage::Three) {
        const Blocked b = blocked_ms(r);
        std::printf("   (rank 0 blocked on all-gathers %.1f ms of the last step's %.1f ms: %.1f ms waiting for the "
                    "other ranks, %.1f ms for the data)",
                    b.total, r.step_ms.back(), b.ranks, b.data());
      }
      std::printf("\n");
    }
    for (size_t s = 0; s < r.losses.size(); ++s)
      csv.row(rep.N, dtype_name(rep.dtype), dist::stage_name(r.stage), r.prefetch, s + 1, r.losses[s], r.step_ms[s]);
  }
  double worst = 0;
  for (auto& r : runs)
    for (size_t s = 0; s < r.losses.size(); ++s)
      worst = std::max(worst, std::abs(r.losses[s] - ddp.losses[s]) / std::abs(ddp.losses[s]));
  const char* verdict = worst == 0 ? "the stages' losses are identical" : worst <= loss_tol ? "the stages agree" : "DISAGREE";
  rep.say(detail::str("    largest relative loss difference from DDP: ", worst, " (tolerance ", loss_tol, ") -> ", verdict));
  if (!(worst <= loss_tol)) rep.fail(detail::str("losses differ across stages by ", worst, " > ", loss_tol));
  warn_if_prefetch_measured_slower(rep, runs);
}


void write_trace_csv(const Report& rep, std::span<const StageRun> runs) {
  Csv csv = rep.csv("trace", "n,dtype,stage,prefetch,seq,t_ms,event,unit,param,grad,optim,activation,comm,total");
  for (auto& r : runs)
    for (size_t i = 0; i < r.trace.size(); ++i) {
      const Sample& s = r.trace[i];
      csv.row(rep.N, dtype_name(rep.dtype), dist::stage_name(r.stage), r.prefetch, i, s.t_ms, s.event,
              s.unit == "<root>" ? "root" : s.unit, s.mem[kParam], s.mem[kGrad], s.mem[kOptim], s.mem[kAct], s.mem[kComm],
              s.total);
    }
}

void print_checkpoint_table(Report& rep, const Args& a, std::span<const StageRun> plain, std::span<const StageRun> ckpt) {
  const int64_t saved_form = dist::checkpointing_saved_bytes(a.n_layer, a.batch / rep.N, a.seq, a.n_embd, a.n_head, rep.eb.s);
  const bool has_form = rep.dtype == DType::F32;  // bf16 on the CPU computes through f32 copies
  rep.say("\n[5] Activation checkpointing of every block (ZeRO-R's recompute): the forward keeps each block's input");
  rep.say("    only; the backward recomputes the block, then differentiates it. 'kept' = activations alive when the");
  rep.say(detail::str("    loss is computed; closed form of what checkpointing saves: ", dist::kCheckpointingSavedFormula,
                      has_form ? "" : " (f32 only)"));
  rep.say("    (dist::block_activation_bytes). Losses and bytes on the wire must equal the run without.");
  rep.say(table_rule());
  if (rep.lead)
    std::printf("    %-7s %12s %12s %12s %12s %-3s %12s %12s %9s %9s %6s  %-6s %-7s\n", "stage", "kept", "kept ckpt",
                "saved", "closed form", "ok", "act peak", "peak ckpt", "step ms", "ckpt ms", "cost", "losses", "traffic");
  Csv csv = rep.csv("checkpoint", "n,dtype,stage,checkpoint,kept_after_forward,activation_peak,total_peak,step_ms,saved_closed_form");
  for (size_t i = 0; i < plain.size() && i < ckpt.size(); ++i) {
    const StageRun &p = plain[i], &c = ckpt[i];
    const char* title = dist::stage_title(p.stage);
    const int64_t kp = kept_after_forward(p), kc = kept_after_forward(c);
    const bool form_ok = !has_form || kp - kc == saved_form;
    if (!form_ok)
      rep.fail(detail::str(title, " checkpointed: the forward kept ", kp - kc, " fewer activation bytes, closed form ", saved_form));
    const bool same_losses = p.losses == c.losses;
    if (!same_losses) rep.fail(detail::str(title, " checkpointed: losses differ from the run without"));
    const bool same_traffic = same_collectives(p, c);
    if (!same_traffic) rep.fail(detail::str(title, " checkpointed: collectives differ from the run without"));
    const double pm = median_step_ms(p), cm = median_step_ms(c);
    if (rep.lead)
      std::printf("    %-7s %12s %12s %12s %12s %-3s %12s %12s %9.1f %9.1f %5.2fx  %-6s %-7s\n", title, commas(kp).c_str(),
                  commas(kc).c_str(), commas(kp - kc).c_str(), has_form ? commas(saved_form).c_str() : "-",
                  has_form ? (form_ok ? "yes" : "NO") : "", commas(p.peak[kAct]).c_str(), commas(c.peak[kAct]).c_str(),
                  pm, cm, cm / pm, same_losses ? "same" : "DIFFER", same_traffic ? "same" : "DIFFERS");
    for (const StageRun* r : {&p, &c})
      csv.row(rep.N, dtype_name(rep.dtype), dist::stage_name(r->stage), r->checkpointed ? 1 : 0, kept_after_forward(*r),
              r->peak[kAct], r->total_peak, median_step_ms(*r), has_form ? saved_form : -1);
  }
}

}  // namespace zdl::walkthrough

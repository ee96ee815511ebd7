#include "examples/train_gpt/train_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "dist/zero/metrics.h"
#include "io/interrupt.h"
#include "io/program_main.h"
#include "optim/schedule.h"

namespace zdl::train_gpt {

using json = nlohmann::json;
using io::UsageError;

namespace {

// "step 7: loss nan, non-finite gradients in h.1 (on 1 of 2 ranks), <root> (on 2 of 2 ranks)".
std::string nonfinite_report(const dist::StepResult& r, int64_t step, int world) {
  std::string s = detail::str("step ", step + 1, ": loss ", r.loss, ", ");
  if (r.nonfinite.empty()) return s + "gradients finite";
  s += "non-finite gradients in ";
  for (size_t i = 0; i < r.nonfinite.size(); ++i)
    s += detail::str(i ? ", " : "", r.nonfinite[i].name, " (on ", r.nonfinite[i].ranks, " of ", world, " ranks)");
  return s;
}

// Test hook for the NaN handling (hidden flag --fault-nan-grad STEP:PARAM): at that step (1-based)
// the last rank's gradient of PARAM gets a NaN before any reduction, as a numeric blow-up would.
void install_fault_nan_grad(const std::string& spec, nn::Module& model, dist::Communicator& comm,
                            const int64_t* current_step) {
  if (spec.empty()) return;
  auto colon = spec.find(':');
  int64_t at = 0;
  try {
    at = std::stoll(spec.substr(0, colon));
  } catch (const std::exception&) {
    colon = std::string::npos;
  }
  if (colon == std::string::npos) throw UsageError("--fault-nan-grad: expected STEP:PARAM, got '" + spec + "'");
  std::string name = spec.substr(colon + 1);
  auto params = model.named_parameters();
  auto it = std::find_if(params.begin(), params.end(), [&](const auto& np) { return np.first == name; });
  if (it == params.end()) throw UsageError("--fault-nan-grad: the model has no parameter '" + name + "'");
  if (comm.rank() != comm.size() - 1) return;
  it->second.register_hook([at, current_step](const Tensor& g) {
    if (*current_step + 1 != at) return g;
    Tensor bad = g.to(Device::cpu()).contiguous_copy();  // a GPU gradient is poisoned on the host
    if (bad.dtype() == DType::BF16) bad.data<BFloat16>()[0] = BFloat16(std::nanf(""));
    else bad.data<float>()[0] = std::nanf("");
    return bad.to(g.device());
  });
}

// A step whose loss or gradients were not finite: --on-nan stop ends the run, skip goes on up to
// --nan-skip-limit such steps in a row. nan_streak counts them.
void on_nonfinite(const Session& x, const dist::StepResult& r, int64_t step, int64_t& nan_streak, io::Progress& progress) {
  if (r.applied) {
    nan_streak = 0;
    return;
  }
  const std::string what = nonfinite_report(r, step, x.comm.size());
  if (x.a.on_nan == "stop")
    throw io::CollectiveStop(what + "; stopping (--on-nan stop; checkpoints already written are intact)");
  if (++nan_streak >= x.a.nan_skip_limit)
    throw io::CollectiveStop(detail::str(what, "; ", nan_streak, " steps in a row were non-finite (--nan-skip-limit ",
                                         x.a.nan_skip_limit, "); stopping"));
  progress.message(what + "; step skipped (--on-nan skip)");
}

// The step's console line and metrics line.
void report_step(Session& x, const dist::StepResult& r, int64_t step, int64_t first_step, double ms,
                 const DeviceInfo& gpu, io::Progress& progress) {
  const Args& a = x.a;
  const double tok_s = static_cast<double>(a.batch * a.seq * a.grad_accum) / (ms / 1000.0);
  const double mfu = gpu.peak_bf16_tflops > 0 ? x.s.cfg.training_flops_per_token(a.seq) * tok_s / (gpu.peak_bf16_tflops * 1e12) : -1;
  progress.step(step, first_step, r.loss, x.opt.lr(), tok_s, mfu);
  json line = {{"step", step + 1},
               {"loss", r.loss},
               {"skipped", !r.applied},
               {"lr", x.opt.lr()},
               {"grad_norm", r.grad_norm},
               {"tokens_per_s", tok_s},
               {"ms", ms},
               {"mem", dist::memory_snapshot(x.dev)},
               {"comm", dist::comm_snapshot()}};
  if (mfu >= 0) line["mfu"] = mfu;
  x.s.metrics->write(line);
}

// Validation and checkpoints after a step, as the flags ask; true: --stop-after or a signal
// (`stop_signal`, StepResult's) ends the run here. A signal saves at once, off the cadence.
bool after_step(Session& x, int64_t step, int stop_signal, io::Progress& progress) {
  const Args& a = x.a;
  const bool last = step + 1 == a.steps || step + 1 == a.stop_after;
  // An interrupted run saves and goes: no evaluation keeps the user waiting.
  if (stop_signal == 0 && a.eval_every > 0 && ((step + 1) % a.eval_every == 0 || last) && a.val_fraction > 0) {
    const double val = evaluate(x, data::Split::Val, a.eval_batches).first;
    progress.message(detail::str("step ", step + 1, ": val_loss ", val));
    x.s.metrics->write({{"step", step + 1}, {"val_loss", val}});
  }
  if (!a.save.empty() && (last || stop_signal != 0 || (a.save_every > 0 && (step + 1) % a.save_every == 0))) {
    save(x, step + 1);
    progress.message("saved checkpoint to " + a.save);
  }
  if (stop_signal != 0) {
    // For scripts: a launcher may not pass the exit code on (MPICH's mpiexec after a Ctrl-C).
    x.s.metrics->write({{"type", "interrupted"}, {"signal", io::signal_name(stop_signal)}, {"step", step + 1},
                        {"saved", !a.save.empty()}});
    progress.message(detail::str("interrupted (", io::signal_name(stop_signal), ") after step ", step + 1, ": ",
                                 a.save.empty() ? "nothing saved (no --save)"
                                                : "checkpoint saved; --resume " + a.save + " continues"));
    return true;
  }
  if (step + 1 != a.stop_after) return false;
  progress.message(detail::str("stopping after step ", step + 1, " (--stop-after): ",
                               a.save.empty() ? "nothing saved (no --save)"
                                              : "checkpoint saved; --resume " + a.save + " continues"));
  return true;
}

}  // namespace

int train(Session& x, int64_t first_step, const DeviceInfo& gpu, io::Progress& progress) {
  const Args& a = x.a;
  optim::CosineSchedule sched{a.lr, a.lr * a.min_lr_ratio, a.warmup, a.steps};
  auto rows = [&](int64_t step, int64_t first, int64_t count) { return x.step_rows(step, first, count); };
  auto loss = [&](const Tensor& in, const Tensor& targets) { return x.loss(in, targets); };
  int64_t nan_streak = 0;  // non-finite steps in a row
  int64_t current_step = first_step;
  install_fault_nan_grad(a.fault_nan_grad, x.model, x.comm, &current_step);
  x.model.train();
  for (int64_t step = first_step; step < a.steps; ++step) {
    current_step = step;
    auto t0 = std::chrono::steady_clock::now();
    memory_ledger().reset_peaks(x.dev);
    dist::comm_ledger().reset();
    // The library step ([Note: micro-batch schedule], dist/zero/trainer.h): the same flags with
    // --batch / N fixed give the same bits at any N (docs/exactness.md).
    x.opt.set_lr(sched.lr(step));
    const dist::StepResult r = x.trainer.step(step, rows, loss);
    x.ds().set_position(step + 1);
    on_nonfinite(x, r, step, nan_streak, progress);
    // No wait for the GPU here: the step's own wait (the gradient norm) comes after its
    // backward, so the host runs ahead by the optimizer update at most and a step's time is
    // the GPU's, the previous update included.
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    report_step(x, r, step, first_step, ms, gpu, progress);
    if (after_step(x, step, r.stop_signal, progress)) return r.stop_signal;
  }
  return 0;
}

}  // namespace zdl::train_gpt

// The console line of a long run: step, loss, lr, tokens/s (and MFU on GPUs), ETA. Updated in
// place on a terminal; in a log, a line every `log_every` steps (default: 20 lines per run).
// Quiet on every rank but the one that reports, so N ranks print one line, not N.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace zdl::io {

class Progress {
 public:
  Progress(int64_t total_steps, int64_t log_every, bool quiet);
  // After step `step` (0-based) of a run that started at `first_step`. mfu < 0: not known
  // (CPU runs, GPUs without a peak rate), left out of the line.
  void step(int64_t step, int64_t first_step, double loss, double lr, double tokens_per_s, double mfu = -1);
  // A line of its own (evaluations, saves, skipped steps), not overwritten by the next step.
  void message(const std::string& m);
  // Seconds as the ETA prints them: "42s", "3m07s", "2h05m", "3d04h", ">100d", "?" (unknown).
  static std::string format_eta(double seconds);

 private:
  int64_t total_;
  bool tty_;
  int64_t every_;
  bool quiet_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace zdl::io

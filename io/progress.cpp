#include "io/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace zdl::io {

Progress::Progress(int64_t total_steps, int64_t log_every, bool quiet)
    : total_(total_steps), tty_(isatty(fileno(stdout)) != 0), every_(log_every), quiet_(quiet) {
  if (every_ <= 0) every_ = std::max<int64_t>(1, total_ / 20);
  start_ = std::chrono::steady_clock::now();
}

void Progress::step(int64_t step, int64_t first_step, double loss, double lr, double tokens_per_s, double mfu) {
  if (quiet_) return;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double per_step = elapsed / static_cast<double>(step - first_step + 1);
  const double eta = per_step * static_cast<double>(total_ - step - 1);
  char mfu_text[32] = "";
  if (mfu >= 0) std::snprintf(mfu_text, sizeof mfu_text, "  MFU %.1f%%", 100 * mfu);
  char line[256];
  std::snprintf(line, sizeof line, "step %5lld/%lld  loss %.4f  lr %.2e  %.0f tok/s%s  ETA %s",
                static_cast<long long>(step + 1), static_cast<long long>(total_), loss, lr, tokens_per_s, mfu_text,
                format_eta(eta).c_str());
  if (tty_) {
    std::printf("\r%s\033[K", line);
    if (step + 1 == total_) std::printf("\n");
    std::fflush(stdout);
  } else if ((step + 1) % every_ == 0 || step == first_step || step + 1 == total_) {
    std::printf("%s\n", line);
    std::fflush(stdout);
  }
}

void Progress::message(const std::string& m) {
  if (quiet_) return;
  std::printf(tty_ ? "\r%s\033[K\n" : "%s\n", m.c_str());
  std::fflush(stdout);
}

std::string Progress::format_eta(double s) {
  char b[32];
  if (!std::isfinite(s) || s < 0) return "?";
  if (s >= 100.0 * 86400) return ">100d";
  if (s >= 86400) {
    std::snprintf(b, sizeof b, "%dd%02dh", static_cast<int>(s / 86400), static_cast<int>(s / 3600) % 24);
    return b;
  }
  if (s < 60) std::snprintf(b, sizeof b, "%.0fs", s);
  else if (s < 3600) std::snprintf(b, sizeof b, "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  else std::snprintf(b, sizeof b, "%dh%02dm", static_cast<int>(s) / 3600, (static_cast<int>(s) % 3600) / 60);
  return b;
}

}  // namespace zdl::io

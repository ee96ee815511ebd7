#include "examples/zero_walkthrough/report.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "io/program_main.h"

namespace zdl::walkthrough {

Csv::Csv(const std::string& path, const std::string& header, bool active) {
  if (!active) return;
  out_.open(path);
  if (!out_) throw io::UsageError("cannot write '" + path + "'");
  out_ << std::setprecision(17) << header << "\n";
}

void Report::say(const std::string& m) const {
  if (lead) std::printf("%s\n", m.c_str());
}

std::string Report::suffix() const { return detail::str("_n", N, ".csv"); }

Csv Report::csv(const char* name, const std::string& header) const {
  return Csv((std::filesystem::path(out) / (std::string(name) + suffix())).string(), header, lead);
}

std::string table_rule() { return detail::str("    ", std::string(118, '-')); }

std::string commas(int64_t v) {
  std::string d = std::to_string(v < 0 ? -v : v), o;
  for (size_t i = 0; i < d.size(); ++i) {
    if (i > 0 && (d.size() - i) % 3 == 0) o += ',';
    o += d[i];
  }
  return (v < 0 ? "-" : "") + o;
}

std::string mib(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", bytes / (1024.0 * 1024.0));
  return b;
}

namespace {
// The step times after the first (which pays for first-touch allocations), sorted.
std::vector<double> timed_steps(const StageRun& r) {
  std::vector<double> v(r.step_ms.begin() + (r.step_ms.size() > 1), r.step_ms.end());
  std::sort(v.begin(), v.end());
  return v;
}
}  // namespace

double median_step_ms(const StageRun& r) {
  const std::vector<double> v = timed_steps(r);
  if (v.empty()) return 0;
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::pair<double, double> step_ms_range(const StageRun& r) {
  const std::vector<double> v = timed_steps(r);
  if (v.empty()) return {0, 0};
  return {v.front(), v.back()};
}

}  // namespace zdl::walkthrough

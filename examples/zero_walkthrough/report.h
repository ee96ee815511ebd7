// What the walkthrough's tables share: rank 0 prints them and writes their CSVs; every rank runs
// every check and keeps the failed ones, which rank 0 prints at the end. And the numbers' format.
#pragma once
#include <cstdint>
#include <fstream>
#include <iomanip>
#include <string>
#include <vector>

#include "dist/zero/closed_forms.h"
#include "examples/zero_walkthrough/stage_run.h"

namespace zdl::walkthrough {

// A CSV file with a header line, written only where `active` (rank 0).
class Csv {
 public:
  // Throws io::UsageError if the file cannot be written.
  Csv(const std::string& path, const std::string& header, bool active);
  template <class... T>
  void row(const T&... v) {
    if (!out_.is_open()) return;
    int i = 0;
    ((out_ << (i++ ? "," : "") << v), ...);
    out_ << "\n";
  }

 private:
  std::ofstream out_;
};

struct Report {
  bool lead = false;
  int N = 1;
  DType dtype = DType::F32;
  dist::ElementBytes eb{};
  std::string out;  // --out
  std::vector<std::string> failures;

  void say(const std::string& m) const;
  void fail(const std::string& m) { failures.push_back(m); }
  // "_n<N>.csv": runs at several N share one --out.
  std::string suffix() const;
  Csv csv(const char* name, const std::string& header) const;
};

std::string table_rule();       // the line under a table's title
std::string commas(int64_t v);  // 1234567 -> "1,234,567"
std::string mib(double bytes);  // "%.2f" MiB
// The median of a run's steps after the first (of the only one if there is one).
double median_step_ms(const StageRun& r);
std::pair<double, double> step_ms_range(const StageRun& r);  // fastest and slowest of those steps

}  // namespace zdl::walkthrough

#include "io/environment.h"

#include <sched.h>

#include <cstdlib>
#include <regex>

#include "core/check.h"
#include "dist/comm/communicator.h"
#include "kernels/cpu/matmul.h"

namespace zdl::io {

namespace {

std::string omp_num_threads_problem() {
  const char* env = std::getenv("OMP_NUM_THREADS");
  if (env == nullptr || *env == '\0') return "";
  static const std::regex counts(R"(\s*[0-9]+\s*(,\s*[0-9]+\s*)*)");
  static const std::regex positive(R"(\s*0*[1-9][0-9]*\s*(,\s*0*[1-9][0-9]*\s*)*)");
  const std::string value = env;
  const std::string bad = "OMP_NUM_THREADS='" + value + "' ";
  if (!std::regex_match(value, counts))
    return bad + "is not a number of threads (a positive integer such as 4, or a list such as 4,2)";
  if (!std::regex_match(value, positive)) return bad + "asks for no threads: give 1 or more";
  // The first level's count is what zerodl's parallel loops use.
  const double first = std::strtod(value.c_str(), nullptr);
  // Not omp_get_num_procs(): starting libomp with this value is what aborts.
  cpu_set_t set;
  const int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  if (first > static_cast<double>(kMaxThreadsPerCore) * cores)
    return detail::str(bad, "is more than ", kMaxThreadsPerCore, " threads for each of this machine's ", cores,
                       " cores: give at most the number of cores (each rank's share of them under mpirun)");
  return "";
}

// The message of what `check` throws, without its code location; "" if it throws nothing.
template <class F>
std::string problem_of(F&& check) {
  try {
    check();
  } catch (const std::exception& e) {
    return without_code_location(e.what());
  }
  return "";
}

}  // namespace

std::string environment_problem() {
  if (std::string p = omp_num_threads_problem(); !p.empty()) return p;
  if (std::string p = problem_of([] { kernels::cpu::gemm_backend_from_environment(); }); !p.empty()) return p;
  return problem_of([] { dist::check_environment(); });
}

}  // namespace zdl::io

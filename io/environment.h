// The environment variables a zerodl program reads, checked at its start: a bad value is bad
// input (exit 2, one line naming the variable), not an abort in the OpenMP runtime or a failure
// part way through the first step.
#pragma once
#include <string>

namespace zdl::io {

// "" when every variable is fine, else what is wrong with the first bad one:
//   OMP_NUM_THREADS           positive thread counts ("4", or "4,2" per nesting level), at most
//                             kMaxThreadsPerCore per core (libomp aborts on anything else, or
//                             fails to start that many threads)
//   ZDL_CPU_GEMM              a CPU GEMM back end this build and CPU have (kernels/cpu/matmul.h)
//   ZDL_DIST_BACKEND, ZDL_RANKS_PER_NODE, ZDL_COLLECTIVE_TIMEOUT_S   (dist::check_environment)
// Call it before anything starts OpenMP: libomp reads OMP_NUM_THREADS when it starts.
std::string environment_problem();

inline constexpr int kMaxThreadsPerCore = 16;

}  // namespace zdl::io

// Checks for CUDA runtime calls: a failure throws zdl::Error with the call, file:line and the
// CUDA error string. Only included by files compiled in the CUDA build.
#pragma once
#include <cuda_runtime.h>

#include "core/check.h"

#define ZDL_CUDA_CHECK(call)                                                                      \
  do {                                                                                            \
    cudaError_t zdl_err_ = (call);                                                                \
    if (zdl_err_ != cudaSuccess)                                                                  \
      ::zdl::detail::throw_error(__FILE__, __LINE__, #call,                                       \
                                 ::zdl::detail::str("CUDA error: ", cudaGetErrorString(zdl_err_))); \
  } while (0)

namespace zdl::detail {
// Implemented in core/cuda_runtime.cpp: cudaGetLastError, and with ZDL_CUDA_SYNC_LAUNCHES=1 a
// stream synchronization too, so a fault inside the kernel is blamed on its launch site.
void check_launch(const char* file, int line, const char* function);
}  // namespace zdl::detail

// After a kernel launch: a bad launch configuration (and, in the debug mode, a fault in the
// kernel) throws naming the launching function and file:line.
#define ZDL_CUDA_CHECK_LAUNCH() ::zdl::detail::check_launch(__FILE__, __LINE__, __func__)

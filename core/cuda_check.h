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

// After a kernel launch: catches bad launch configurations at the launch site.
#define ZDL_CUDA_CHECK_LAUNCH() ZDL_CUDA_CHECK(cudaGetLastError())

// One context object per thread and GPU, made on first use: what a CUDA library needs per
// thread (its handle, bound to the per-thread stream) and caches per device (plans, graphs).
// Host-compiler clean, for .cu and .cpp files alike.
//
//   GemmContext& ctx = thread_device_context<GemmContext>();   // GemmContext(int device)
#pragma once
#include <cuda_runtime.h>

#include <map>
#include <memory>

#include "core/cuda_check.h"

namespace zdl::kernels::cuda {

template <class Context>
Context& thread_device_context() {
  thread_local std::map<int, std::unique_ptr<Context>> contexts;
  int device = 0;
  ZDL_CUDA_CHECK(cudaGetDevice(&device));
  auto& c = contexts[device];
  if (!c) c = std::make_unique<Context>(device);
  return *c;
}

}  // namespace zdl::kernels::cuda

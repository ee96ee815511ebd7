// The stream all of zerodl's CUDA work runs on: kernels, cuBLASLt and cuDNN calls, copies and
// the stream-ordered allocator. Host-compiler clean, for .cpp files that call CUDA libraries.
#pragma once
#include <cuda_runtime.h>

namespace zdl::kernels::cuda {

// The per-thread default stream, the one the allocator orders frees on (collectives use their own).
inline cudaStream_t compute_stream() { return cudaStreamPerThread; }

}  // namespace zdl::kernels::cuda

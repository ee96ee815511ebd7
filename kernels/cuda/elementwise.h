// Elementwise CUDA kernels (the CPU twins are in kernels/cpu/elementwise.h and are the test
// oracle). Layered as llm.c/ggml do: __global__ kernel -> launcher taking a stream -> this
// checked entry point. Contiguous, same-shape operands; broadcasting goes through the CPU
// path until the CUDA backend issue adds strided kernels.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cpu/elementwise.h"

namespace zdl::kernels::cuda {

// out[i] = a[i] op b[i] for n elements of dtype (f32, bf16), on the per-thread default stream.
void binary(cpu::BinaryOp op, DType dtype, int64_t n, void* out, const void* a, const void* b);

// out[i] = (To)in[i] for f32 <-> bf16.
void cast(DType from, DType to, int64_t n, const void* in, void* out);

}  // namespace zdl::kernels::cuda

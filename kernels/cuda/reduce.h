// Sum reductions on CUDA, the twin of kernels/cpu/reduce.h (the test oracle): a contiguous
// buffer x viewed as [outer, reduce, inner] gives out[o, i] = scale * sum_r x[o, r, i]
// (out contiguous [outer, inner]). Row sums are inner = 1, column sums (bias gradients over B*T
// rows) outer = 1.
//
// Accuracy and determinism: every element is accumulated in double, as the CPU twin does for
// f32 (and, through the f32 detour, for bf16), then rounded to f32, multiplied by (float)scale
// in f32 and stored (bf16: rounded once more). With scale = 1 that is the CPU's sum; with
// scale = 1/count it is the CPU's mean, mul(sum(x), 1/count), bit for bit up to the summation
// order of the double accumulator. The order is fixed by the sizes alone (a warp per row chunk
// with a fixed shuffle tree, or a thread per column chunk; chunks summed in index order by a
// second kernel): no atomics, so results are bit-identical run to run and on any GPU.
//
// Long reductions over few outputs are split into chunks whose double partial sums go to a
// caller-provided device workspace of sum_reduce_workspace_bytes(...) bytes (0 when no split is
// needed; then `workspace` may be null). The caller allocates it (e.g. a Workspace-category
// tensor); the stream-ordered allocator makes freeing it right after the call safe.
//
//   size_t ws = kernels::cuda::sum_reduce_workspace_bytes(outer, red, inner);
//   Tensor w = Tensor::empty({int64_t(ws / 8)}, DType::F64, x.device());    // under MemoryScope(Workspace)
//   kernels::cuda::sum_reduce(DType::BF16, outer, red, inner, x.raw_data(), out.raw_data(), w.raw_data());
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace zdl::kernels::cuda {

// Bytes of device workspace sum_reduce needs for these sizes (a multiple of 8; may be 0).
size_t sum_reduce_workspace_bytes(int64_t outer, int64_t reduce, int64_t inner);

// out[o, i] = scale * sum_r x[o, r, i]; dtype f32 or bf16 (x and out). reduce == 0 gives zeros.
void sum_reduce(DType dtype, int64_t outer, int64_t reduce, int64_t inner, const void* x, void* out,
                void* workspace, double scale = 1.0);

}  // namespace zdl::kernels::cuda

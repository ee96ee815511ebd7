// Embedding lookup and its gradient on CUDA; the CPU twin (kernels/cpu/embedding.h) is the
// test oracle. weight (V, C) of f32 or bf16, ids (n) of i32 or i64, all contiguous on the device.
//
// Choices:
// - Ids are validated before any kernel reads through them: scan_indices() finds the first
//   out-of-range id on the device and copies three numbers back, so the op throws the CPU's
//   error (naming the id and its position) instead of reading out of bounds. The scan is
//   shared with cross_entropy's target check (ignore_index aware).
// - Deterministic backward without float atomics: the (id, position) pairs are sorted by id
//   with CUB's radix sort (stable, so positions stay in increasing order within an id), then one
//   block per distinct id sums its dout rows in position order, one thread per column, in f32.
//   That is the CPU twin's order (it walks positions in order per column), so f32 gradients
//   are bit-identical to the CPU's; rows never looked up are zero.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace zdl::kernels::cuda {

struct IndexScan {
  int64_t first_bad = -1;  // position of the first bad index, -1 if none
  int64_t bad_value = 0;   // the index there
  int64_t count = 0;       // indices != ignore_index (all n without use_ignore)
};

// Device bytes of scan_indices' workspace.
constexpr size_t kIndexScanWorkspaceBytes = 2 * sizeof(unsigned long long);

// Scans n indices of idtype (i32/i64) on the device. Bad: outside [0, V) and, with
// use_ignore, not equal to ignore_index. Waits for the compute stream (the result is needed on
// the host before anything is launched with these indices).
IndexScan scan_indices(DType idtype, int64_t n, const void* ids, int64_t V, bool use_ignore, int64_t ignore_index,
                       void* workspace);

// out[i, :] = weight[ids[i], :]; out (n, C). Ids must be valid (scan_indices first).
void embedding_forward(DType dtype, DType idtype, int64_t n, int64_t C, const void* weight, const void* ids,
                       void* out);

// Device bytes of workspace embedding_backward needs for n ids and V rows.
size_t embedding_backward_workspace_bytes(int64_t n, int64_t V);

// dweight (V, C) = sum over i with ids[i] == v of dout[i, :] (n, C); overwritten, rows never
// looked up get 0. `workspace` holds embedding_backward_workspace_bytes(n, V) bytes.
void embedding_backward(DType dtype, DType idtype, int64_t n, int64_t V, int64_t C, const void* ids,
                        const void* dout, void* dweight, void* workspace, size_t workspace_bytes);

}  // namespace zdl::kernels::cuda

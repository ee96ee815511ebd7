// Embedding lookup and its gradient on CUDA; the CPU twin (kernels/cpu/embedding.h) is the
// test oracle. weight (V, C) of f32 or bf16, ids (n) of i32 or i64, all contiguous on the device.
//
// Choices:
// - Ids are checked on the device without a host wait: scan_indices() finds the first
//   out-of-range id and its value; the op queues a deferred check of those words
//   ([Note: reads the host takes later], core/deferred_read.h), which throws the CPU's error
//   (naming the id and its position) at the host's next wait. Until then the kernels read
//   nothing through a bad id: its embedding row is zero and its gradient is dropped. The scan
//   is shared with cross_entropy's target check (ignore_index aware), whose kernels read the
//   count of rows from the workspace.
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

// Device bytes of scan_indices' workspace: three words (the first bad position, encoded; the
// count; the bad value).
constexpr size_t kIndexScanWorkspaceBytes = 3 * sizeof(unsigned long long);

// Queues a scan of n indices of idtype (i32/i64) on the device, no host wait. Bad: outside
// [0, V) and, with use_ignore, not equal to ignore_index. Afterwards the workspace's second word
// (an unsigned 64-bit count) holds the number of indices != ignore_index (n without
// use_ignore), for later kernels; index_scan_result() decodes all three words on the host.
void scan_indices(DType idtype, int64_t n, const void* ids, int64_t V, bool use_ignore, int64_t ignore_index,
                  void* workspace);
IndexScan index_scan_result(const void* workspace_bytes, int64_t n);

// out[i, :] = weight[ids[i], :]; out (n, C); the row of an id outside [0, V) is zero.
void embedding_forward(DType dtype, DType idtype, int64_t n, int64_t V, int64_t C, const void* weight,
                       const void* ids, void* out);

// Device bytes of workspace embedding_backward needs for n ids and V rows.
size_t embedding_backward_workspace_bytes(int64_t n, int64_t V);

// dweight (V, C) = sum over i with ids[i] == v of dout[i, :] (n, C); overwritten, rows never
// looked up get 0; ids outside [0, V) are skipped. `workspace` holds embedding_backward_workspace_bytes(n, V) bytes.
void embedding_backward(DType dtype, DType idtype, int64_t n, int64_t V, int64_t C, const void* ids,
                        const void* dout, void* dweight, void* workspace, size_t workspace_bytes);

}  // namespace zdl::kernels::cuda

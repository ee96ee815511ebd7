#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <climits>
#include <cstring>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/embedding.h"

namespace zdl::kernels::cuda {

namespace {

// ---- index scan ----

// out[0] = max over bad positions i of (n - i) (0: none; the largest marks the first bad
// position), out[1] = number of indices != ignore_index. Integer atomics only: the result does
// not depend on the order blocks finish. out[2] is left to scan_report_kernel.
template <class I>
__global__ void scan_indices_kernel(int64_t n, const I* ids, int64_t V, bool use_ignore, int64_t ignore_index,
                                    unsigned long long* out) {
  unsigned long long first = 0, count = 0;
  ZDL_GRID_STRIDE(i, n) {
    const int64_t id = static_cast<int64_t>(ids[i]);
    if (use_ignore && id == ignore_index) continue;
    ++count;
    if ((id < 0 || id >= V) && static_cast<unsigned long long>(n - i) > first)
      first = static_cast<unsigned long long>(n - i);
  }
  // Every lane of the warp is here (blockDim is a multiple of 32).
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned long long f = __shfl_xor_sync(0xffffffffu, first, o);
    first = f > first ? f : first;
    count += __shfl_xor_sync(0xffffffffu, count, o);
  }
  if (threadIdx.x % 32 == 0) {
    if (first) atomicMax(&out[0], first);
    if (count) atomicAdd(&out[1], count);
  }
}

// One thread: out[2] = the index at the first bad position (after scan_indices_kernel).
template <class I>
__global__ void scan_report_kernel(int64_t n, const I* ids, unsigned long long* out) {
  if (out[0] != 0) out[2] = static_cast<unsigned long long>(static_cast<int64_t>(ids[n - static_cast<int64_t>(out[0])]));
}

// ---- forward ----

// Block per output row (grid-stride), threads over the C columns. An id out of range (its
// check fails at the next host wait) reads nothing: its row is zero.
template <class T, class I>
__global__ void embedding_forward_kernel(int64_t n, int64_t V, int64_t C, const T* weight, const I* ids, T* out) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const int64_t id = static_cast<int64_t>(ids[i]);
    T* dst = out + i * C;
    if (id < 0 || id >= V) {
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dst[c] = from_f<T>(0.0f);
      continue;
    }
    const T* src = weight + id * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dst[c] = src[c];
  }
}

// ---- backward ----

// An id out of range gets the key V, after every real row; the sums skip it.
template <class I>
__global__ void embedding_sort_input_kernel(int64_t n, int64_t V, const I* ids, uint32_t* keys, int32_t* positions) {
  ZDL_GRID_STRIDE(i, n) {
    const int64_t id = static_cast<int64_t>(ids[i]);
    keys[i] = static_cast<uint32_t>(id < 0 || id >= V ? V : id);
    positions[i] = static_cast<int32_t>(i);
  }
}

// Block per sorted slot k (grid-stride); only the first slot of each id's run works: it sums
// the run's dout rows in sorted order = increasing position (the sort is stable).
template <class T>
__global__ void embedding_segment_sum_kernel(int64_t n, int64_t V, int64_t C, const uint32_t* keys,
                                             const int32_t* positions, const T* dout, T* dweight) {
  for (int64_t k = blockIdx.x; k < n; k += gridDim.x) {
    const uint32_t id = keys[k];
    if (static_cast<int64_t>(id) >= V) break;  // the bad ids' run, last in sorted order
    if (k > 0 && keys[k - 1] == id) continue;  // not a run start (same for the whole block)
    int64_t end = k + 1;
    while (end < n && keys[end] == id) ++end;
    T* dst = dweight + static_cast<int64_t>(id) * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      float acc = 0.0f;
#pragma unroll 4
      for (int64_t j = k; j < end; ++j) acc += to_f(dout[static_cast<int64_t>(positions[j]) * C + c]);
      dst[c] = from_f<T>(acc);
    }
  }
}

// Bits needed for keys in [0, V] (V: an id out of range).
int key_bits(int64_t V) {
  int bits = 1;
  while (bits < 32 && (int64_t{1} << bits) <= V) ++bits;
  return bits;
}

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

size_t sort_temp_bytes(int64_t n, int64_t V) {
  size_t bytes = 0;
  ZDL_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const uint32_t*>(nullptr),
                                                 static_cast<uint32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                                 static_cast<int32_t*>(nullptr), static_cast<int>(n), 0, key_bits(V),
                                                 compute_stream()));
  return bytes;
}

// Threads per block for rows of C columns: a multiple of 32, at most kBlock.
int row_threads(int64_t C) { return static_cast<int>(std::min<int64_t>(kBlock, (C + 31) / 32 * 32)); }

unsigned rows_grid(int64_t rows) { return static_cast<unsigned>(std::clamp<int64_t>(rows, 1, 65535 * 16)); }

void check_sort_limits(int64_t n, int64_t V) {
  ZDL_CHECK(n <= INT_MAX, "embedding backward (cuda): at most ", INT_MAX, " ids per call, got ", n);
  ZDL_CHECK(V <= static_cast<int64_t>(UINT32_MAX), "embedding backward (cuda): V=", V, " exceeds 2^32 - 1 rows");
}

}  // namespace

void scan_indices(DType idtype, int64_t n, const void* ids, int64_t V, bool use_ignore, int64_t ignore_index,
                  void* workspace) {
  ZDL_CHECK(idtype == DType::I32 || idtype == DType::I64, "scan_indices (cuda): indices must be i32 or i64, got ",
            dtype_name(idtype));
  cudaStream_t s = compute_stream();
  auto* out = static_cast<unsigned long long*>(workspace);
  ZDL_CUDA_CHECK(cudaMemsetAsync(out, 0, kIndexScanWorkspaceBytes, s));
  if (n <= 0) return;
  if (idtype == DType::I32) {
    scan_indices_kernel<<<grid_for(n), kBlock, 0, s>>>(n, static_cast<const int32_t*>(ids), V, use_ignore,
                                                       ignore_index, out);
    ZDL_CUDA_CHECK_LAUNCH();
    scan_report_kernel<<<1, 1, 0, s>>>(n, static_cast<const int32_t*>(ids), out);
  } else {
    scan_indices_kernel<<<grid_for(n), kBlock, 0, s>>>(n, static_cast<const int64_t*>(ids), V, use_ignore,
                                                       ignore_index, out);
    ZDL_CUDA_CHECK_LAUNCH();
    scan_report_kernel<<<1, 1, 0, s>>>(n, static_cast<const int64_t*>(ids), out);
  }
  ZDL_CUDA_CHECK_LAUNCH();
}

IndexScan index_scan_result(const void* workspace_bytes, int64_t n) {
  unsigned long long w[3];
  std::memcpy(w, workspace_bytes, sizeof(w));
  IndexScan r;
  r.count = static_cast<int64_t>(w[1]);
  if (w[0] != 0) {
    r.first_bad = n - static_cast<int64_t>(w[0]);
    r.bad_value = static_cast<int64_t>(w[2]);
  }
  return r;
}

void embedding_forward(DType dtype, DType idtype, int64_t n, int64_t V, int64_t C, const void* weight,
                       const void* ids, void* out) {
  if (n <= 0 || C <= 0) return;
  cudaStream_t s = compute_stream();
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const T* w = static_cast<const T*>(weight);
    T* o = static_cast<T*>(out);
    if (idtype == DType::I32)
      embedding_forward_kernel<<<rows_grid(n), row_threads(C), 0, s>>>(n, V, C, w, static_cast<const int32_t*>(ids), o);
    else if (idtype == DType::I64)
      embedding_forward_kernel<<<rows_grid(n), row_threads(C), 0, s>>>(n, V, C, w, static_cast<const int64_t*>(ids), o);
    else
      ZDL_CHECK(false, "embedding (cuda): ids must be i32 or i64, got ", dtype_name(idtype));
    ZDL_CUDA_CHECK_LAUNCH();
  };
  ZDL_CUDA_DISPATCH_FLOAT(dtype, "embedding (cuda)", run);
}

size_t embedding_backward_workspace_bytes(int64_t n, int64_t V) {
  if (n <= 0 || V <= 0) return 0;
  check_sort_limits(n, V);
  const size_t keys = align256(static_cast<size_t>(n) * sizeof(uint32_t));
  const size_t pos = align256(static_cast<size_t>(n) * sizeof(int32_t));
  return 2 * keys + 2 * pos + align256(sort_temp_bytes(n, V));
}

void embedding_backward(DType dtype, DType idtype, int64_t n, int64_t V, int64_t C, const void* ids,
                        const void* dout, void* dweight, void* workspace, size_t workspace_bytes) {
  if (V <= 0 || C <= 0) return;
  cudaStream_t s = compute_stream();
  ZDL_CHECK(dtype == DType::F32 || dtype == DType::BF16, "embedding backward (cuda): dtype ", dtype_name(dtype),
            " is not supported on CUDA (f32, bf16)");
  ZDL_CUDA_CHECK(cudaMemsetAsync(dweight, 0, static_cast<size_t>(V * C) * element_size(dtype), s));  // 0 bits = +0
  if (n <= 0) return;
  ZDL_CHECK(idtype == DType::I32 || idtype == DType::I64, "embedding backward (cuda): ids must be i32 or i64, got ",
            dtype_name(idtype));
  const size_t need = embedding_backward_workspace_bytes(n, V);
  ZDL_CHECK(workspace != nullptr && workspace_bytes >= need, "embedding backward (cuda): workspace of ",
            workspace_bytes, " bytes, need ", need);
  // Workspace: keys in | keys out | positions in | positions out | CUB temp (each 256-aligned).
  char* base = static_cast<char*>(workspace);
  const size_t keys = align256(static_cast<size_t>(n) * sizeof(uint32_t));
  const size_t pos = align256(static_cast<size_t>(n) * sizeof(int32_t));
  auto* keys_in = reinterpret_cast<uint32_t*>(base);
  auto* keys_out = reinterpret_cast<uint32_t*>(base + keys);
  auto* pos_in = reinterpret_cast<int32_t*>(base + 2 * keys);
  auto* pos_out = reinterpret_cast<int32_t*>(base + 2 * keys + pos);
  void* temp = base + 2 * keys + 2 * pos;
  size_t temp_bytes = need - (2 * keys + 2 * pos);

  if (idtype == DType::I32)
    embedding_sort_input_kernel<<<grid_for(n), kBlock, 0, s>>>(n, V, static_cast<const int32_t*>(ids), keys_in,
                                                                pos_in);
  else
    embedding_sort_input_kernel<<<grid_for(n), kBlock, 0, s>>>(n, V, static_cast<const int64_t*>(ids), keys_in,
                                                                pos_in);
  ZDL_CUDA_CHECK_LAUNCH();
  ZDL_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, pos_in, pos_out,
                                                 static_cast<int>(n), 0, key_bits(V), s));
  auto run = [&](auto tag) {
    using T = decltype(tag);
    embedding_segment_sum_kernel<T><<<rows_grid(n), row_threads(C), 0, s>>>(
        n, V, C, keys_out, pos_out, static_cast<const T*>(dout), static_cast<T*>(dweight));
    ZDL_CUDA_CHECK_LAUNCH();
  };
  ZDL_CUDA_DISPATCH_FLOAT(dtype, "embedding backward (cuda)", run);
}

}  // namespace zdl::kernels::cuda

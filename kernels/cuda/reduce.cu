// Sum reductions on CUDA (see reduce.h): x contiguous [outer, reduce, inner] -> out [outer, inner].
//
// Two shapes of work, both accumulating in double in an order fixed by the sizes alone:
//  - inner == 1 (row sums): one warp per (row, chunk); lane l adds elements l, l+32, ... of the
//    chunk (coalesced), then a butterfly shuffle sums the 32 lanes (the same tree every time).
//  - inner > 1 (column sums): one thread per (output element, chunk) walks its rows in order;
//    neighbouring threads read neighbouring columns (coalesced).
// When the outputs alone give too little parallelism (a sum over everything, bias gradients
// over B*T rows), the reduced dimension is cut into `chunks` pieces. Chunk partial sums (double)
// go to the workspace as [chunks, outputs], and a second kernel adds each output's chunks, a
// warp per output, in a fixed order. The chunk count depends only on (outer, reduce, inner), not on the GPU, so the
// result is bit-identical run to run and across devices.
#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/reduce.h"

namespace zdl::kernels::cuda {

namespace {

// Work targets for choosing the chunk count: enough warps/threads to fill an H100 several
// times over (132 SMs x 64 warps = 8448 warps; 2048 threads per SM).
constexpr int64_t kTargetWarps = 8192;        // inner == 1
constexpr int64_t kTargetThreads = 1 << 18;   // inner > 1
// Smallest chunk worth its own partial sum: 1024 elements per warp (32 per lane), 32 rows per thread.
constexpr int64_t kMinRowChunk = 1024;
constexpr int64_t kMinColChunk = 32;
constexpr int kWarpsPerBlock = kBlock / 32;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t outputs_of(int64_t outer, int64_t inner) { return outer * inner; }

int64_t num_chunks(int64_t outer, int64_t reduce, int64_t inner) {
  if (reduce == 0 || outer == 0 || inner == 0) return 1;
  const int64_t parallel = outputs_of(outer, inner);
  const int64_t target = inner == 1 ? kTargetWarps : kTargetThreads;
  const int64_t min_chunk = inner == 1 ? kMinRowChunk : kMinColChunk;
  if (parallel >= target) return 1;
  return std::max<int64_t>(1, std::min(ceil_div(target, parallel), reduce / min_chunk));
}

__device__ __forceinline__ double warp_sum_double(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <class T>
__device__ __forceinline__ void store_sum(T* out, int64_t i, double acc, float scale) {
  out[i] = from_f<T>(static_cast<float>(acc) * scale);  // as the CPU: sum rounded to f32, then * (float)scale
}

// inner == 1. Unit u = c * outer + o: chunk c of row o. One warp per unit.
template <class T>
__global__ void row_sum_kernel(int64_t outer, int64_t reduce, int64_t chunks, int64_t chunk_len, const T* x, T* out,
                               double* partial, float scale) {
  const int lane = threadIdx.x % 32;
  const int64_t units = outer * chunks;
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32; u < units;
       u += static_cast<int64_t>(gridDim.x) * kWarpsPerBlock) {
    const int64_t o = u % outer, c = u / outer;
    const int64_t lo = c * chunk_len, hi = min(reduce, lo + chunk_len);
    const T* row = x + o * reduce;
    double acc = 0.0;
    for (int64_t r = lo + lane; r < hi; r += 32) acc += static_cast<double>(to_f(row[r]));
    acc = warp_sum_double(acc);  // every lane holds the same total
    if (lane == 0) {
      if (chunks == 1) store_sum(out, o, acc, scale);
      else partial[u] = acc;
    }
  }
}

// inner > 1. Thread t = c * (outer*inner) + oi: chunk c of output oi = o*inner + i.
template <class T>
__global__ void col_sum_kernel(int64_t outer, int64_t reduce, int64_t inner, int64_t chunks, int64_t chunk_len,
                               const T* x, T* out, double* partial, float scale) {
  const int64_t outputs = outer * inner;
  ZDL_GRID_STRIDE(t, outputs * chunks) {
    const int64_t oi = t % outputs, c = t / outputs;
    const int64_t o = oi / inner, i = oi % inner;
    const int64_t lo = c * chunk_len, hi = min(reduce, lo + chunk_len);
    const T* col = x + o * reduce * inner + i;
    double acc = 0.0;
    for (int64_t r = lo; r < hi; ++r) acc += static_cast<double>(to_f(col[r * inner]));
    if (chunks == 1) store_sum(out, oi, acc, scale);
    else partial[t] = acc;
  }
}

// out[j] = the sum of partial[c * outputs + j] over the chunks c. One warp per output: lane l
// adds chunks l, l + 32, ... in order, then the butterfly adds the lanes (a fixed tree). A
// thread per output walking hundreds of chunks alone left most of the GPU idle (768 outputs
// for a bias gradient of GPT-2 124M).
template <class T>
__global__ void finish_chunks_kernel(int64_t outputs, int64_t chunks, const double* partial, T* out, float scale) {
  const int lane = threadIdx.x % 32;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32; j < outputs;
       j += static_cast<int64_t>(gridDim.x) * kWarpsPerBlock) {
    double acc = 0.0;
    for (int64_t c = lane; c < chunks; c += 32) acc += partial[c * outputs + j];
    acc = warp_sum_double(acc);
    if (lane == 0) store_sum(out, j, acc, scale);
  }
}

template <class T>
void launch_sum(int64_t outer, int64_t reduce, int64_t inner, const T* x, T* out, double* partial, float scale,
                cudaStream_t s) {
  const int64_t chunks = num_chunks(outer, reduce, inner);
  const int64_t chunk_len = std::max<int64_t>(1, ceil_div(reduce, chunks));
  const int64_t outputs = outputs_of(outer, inner);
  if (inner == 1) {
    const int64_t blocks = ceil_div(outer * chunks, kWarpsPerBlock);
    row_sum_kernel<T><<<static_cast<unsigned>(std::min<int64_t>(blocks, 65535 * 16)), kBlock, 0, s>>>(
        outer, reduce, chunks, chunk_len, x, out, partial, scale);
  } else {
    col_sum_kernel<T><<<grid_for(outputs * chunks), kBlock, 0, s>>>(outer, reduce, inner, chunks, chunk_len, x, out,
                                                                     partial, scale);
  }
  ZDL_CUDA_CHECK_LAUNCH();
  if (chunks > 1) {
    const int64_t blocks = ceil_div(outputs, kWarpsPerBlock);
    finish_chunks_kernel<T><<<static_cast<unsigned>(std::min<int64_t>(blocks, 65535 * 16)), kBlock, 0, s>>>(
        outputs, chunks, partial, out, scale);
    ZDL_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

size_t sum_reduce_workspace_bytes(int64_t outer, int64_t reduce, int64_t inner) {
  const int64_t chunks = num_chunks(outer, reduce, inner);
  return chunks > 1 ? static_cast<size_t>(chunks * outputs_of(outer, inner)) * sizeof(double) : 0;
}

void sum_reduce(DType dtype, int64_t outer, int64_t reduce, int64_t inner, const void* x, void* out, void* workspace,
                double scale) {
  ZDL_CHECK(outer >= 0 && reduce >= 0 && inner >= 0, "cuda sum_reduce: negative size outer=", outer,
            " reduce=", reduce, " inner=", inner);
  if (outputs_of(outer, inner) == 0) return;
  ZDL_CHECK(workspace != nullptr || sum_reduce_workspace_bytes(outer, reduce, inner) == 0,
            "cuda sum_reduce: needs ", sum_reduce_workspace_bytes(outer, reduce, inner),
            " bytes of workspace for outer=", outer, " reduce=", reduce, " inner=", inner, ", got none");
  const float fs = static_cast<float>(scale);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    launch_sum<T>(outer, reduce, inner, static_cast<const T*>(x), static_cast<T*>(out), static_cast<double*>(workspace),
                  fs, compute_stream());
  };
  ZDL_CUDA_DISPATCH_FLOAT(dtype, "cuda sum_reduce", run);
}

}  // namespace zdl::kernels::cuda

// Optimizer kernels on CUDA for ZeRO's flat shards: the twins of kernels/cpu/optim.h (the test
// oracle, tests/cuda/train_cuda_test.cpp). Plain C++ header (no CUDA includes), so .cpp files of
// CPU-only builds can include it behind `#ifdef ZDL_WITH_CUDA`.
//
// AdamW: one launch per flat buffer (a ZeRO unit's master shard), not one per parameter. The
// weight decay differs per parameter (matrices decay, biases and LayerNorm gains do not), so
// the caller describes the buffer as segments [offset, offset + n) with their decay and turns
// them once into a table of chunks of at most kAdamWChunk elements (adamw_chunks), uploaded to
// the device and reused every step. One thread block takes one chunk (grid-stride over chunks),
// its threads walk the chunk's elements: coalesced, no search per element, and the table costs
// 24 bytes per 4096 elements. Per element the arithmetic is the CPU twin's, in f32 and in the
// same order (bias corrections formed in double on the host and rounded to f32, as the CPU
// does), so f32 results agree with the CPU to the last bits up to FMA contraction (~1e-7).
// Masters and moments are f32; gradients f32 or bf16 (widened to f32 on load).
//
// sum_squares: sum of x[i]^2 accumulated in double, deterministic: a fixed grid (a function of
// n alone, not of the GPU) of blocks each reduces a fixed set of elements in a fixed shuffle tree
// into one partial, then one block adds the partials in index order. No atomics: the same input
// gives the same bits on every run and every GPU. The result stays on the device (a double the
// caller copies back once for many buffers), so a gradient-norm over all units costs one sync.
//
//   std::vector<kernels::cuda::AdamWChunk> table = kernels::cuda::adamw_chunks(segments);
//   /* copy table to a device buffer `dev_table` once */
//   kernels::cuda::adamw_update(DType::BF16, dev_table, table.size(), master, grad, m, v, hyper, grad_scale);
//   kernels::cuda::sum_squares(DType::BF16, n, grad, partials, out + unit);
#pragma once
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/optim.h"

namespace zdl::kernels::cuda {

// A run of a flat buffer updated with one weight decay: elements [offset, offset + n).
struct AdamWSegment {
  int64_t offset = 0;
  int64_t n = 0;
  double weight_decay = 0.0;
};

// One block's work: elements [offset, offset + n) with decay weight_decay (n <= kAdamWChunk).
// Plain data, copied to the device as is (24 bytes, 8-byte aligned).
struct AdamWChunk {
  int64_t offset;
  int64_t n;
  float weight_decay;
  float pad_;
};
static_assert(sizeof(AdamWChunk) == 24, "AdamWChunk is copied to the device byte for byte");

constexpr int64_t kAdamWChunk = 4096;

// Splits segments into chunks of at most kAdamWChunk elements, in order (empty segments vanish).
// Throws on a negative offset or size.
std::vector<AdamWChunk> adamw_chunks(const std::vector<AdamWSegment>& segments);

// AdamW (decoupled weight decay) over every chunk of a flat buffer, as cpu::adamw_update:
//   g = grad * grad_scale;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= lr * ( (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd p )
// with wd the chunk's decay (h.weight_decay is ignored). master, m, v: f32 device pointers to
// element 0 of the buffer; grad: the same indexing, dtype grad_dtype (f32 or bf16); chunks: a
// device array of num_chunks entries (from adamw_chunks). Chunks must not overlap (each element
// is updated by one thread). Runs on the compute stream.
void adamw_update(DType grad_dtype, const AdamWChunk* chunks, int64_t num_chunks, float* master, const void* grad,
                  float* m, float* v, const cpu::AdamWParams& h, double grad_scale);

// Doubles of device workspace sum_squares needs for n elements (its partial sums).
int64_t sum_squares_partials(int64_t n);

// *out = sum over i < n of (double)x[i]^2, x of dtype f32 or bf16 (device), out a device double.
// partials: device workspace of sum_squares_partials(n) doubles; calls on one stream may share it
// (each call is done with it before the next one starts). NaN or Inf in x make *out NaN or Inf.
// n == 0 gives 0. Runs on the compute stream; the caller copies *out back when it needs it.
void sum_squares(DType dtype, int64_t n, const void* x, double* partials, double* out);

}  // namespace zdl::kernels::cuda

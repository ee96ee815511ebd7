// Embedding lookup and its gradient on contiguous buffers, weight (V, C), ids (n) of an
// integer type I (int32_t or int64_t).
// Backward splits the C columns across threads and walks the ids in order, so repeated ids
// add up without atomics and the sums are bit-identical for any thread count.
// Kernels assume valid ids: the op (autograd/ops/nn.cpp) checks them first with
// embedding_first_bad_id and throws naming the id.
#pragma once
#include <cstdint>

namespace zdl::kernels::cpu {

// Position of the first id outside [0, V), or -1 when all are valid.
template <class I>
int64_t embedding_first_bad_id(int64_t n, const I* ids, int64_t V);

// out[i, :] = weight[ids[i], :]; out (n, C).
template <class T, class I>
void embedding_forward(int64_t n, int64_t C, const T* weight, const I* ids, T* out);

// dweight (V, C) = sum over i with ids[i] == v of dout[i, :]; dweight is overwritten (rows
// never looked up get 0). T: float, double, BFloat16 (summed in f32, rounded once).
template <class T, class I>
void embedding_backward(int64_t n, int64_t V, int64_t C, const I* ids, const T* dout, T* dweight);

}  // namespace zdl::kernels::cpu

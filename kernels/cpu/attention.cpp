// Causal attention kernels (see attention.h for the saved-state choice).
//
// Work is split into independent items run by one OpenMP loop with dynamic scheduling, and
// each item does its matrix products with single-threaded Eigen: each thread of the region sets
// its own nthreads ICV to 1, which is what Eigen reads, so Eigen never starts a nested team -
// also not when the region has a single thread (where Eigen's "already in a parallel region"
// test would not fire). Row-major Maps view the [T, HS] slices of one (b, h) in place.
//
// Forward: one item per (b, h, block of kAttentionRowBlock query rows). A block needs only the
// keys [0, r1) its last row can see, so S = Q_blk K[0:r1]^T skips the masked upper triangle
// except inside the diagonal block. Items are independent, so this covers both B*NH >= threads
// (whole heads per thread, in effect) and B*NH < threads (one head spread over several threads)
// without two code paths; the heaviest blocks (last rows) are handed out first.
//
// Backward: dK and dV of a head collect contributions from every query block, so query blocks
// of one head cannot run concurrently on the same dK/dV. When there are enough heads each item
// is a whole head writing dK/dV directly; otherwise each head's query blocks are cut into
// `nsplit` chunks of about equal causal cost (rows [0, r) cost ~ r^2, so boundaries sit at
// T*sqrt(s/nsplit)), each chunk accumulates into its own dK/dV buffers in the workspace, and a
// final pass sums them. Recomputing P per block (from the saved logsumexp):
//   P = exp(Q K^T / sqrt(HS) - lse)        dV = P^T dO
//   dP = dO V^T                            dS = P * (dP - rowsum(dO * O))
//   dQ = dS K / sqrt(HS)                   dK = dS^T Q / sqrt(HS)
#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/eigen.h"
#include "kernels/cpu/parallel.h"

namespace zdl::kernels::cpu {

namespace {

template <class T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using MatMap = Eigen::Map<RowMat<T>>;
template <class T>
using ConstMatMap = Eigen::Map<const RowMat<T>>;
// Score blocks in the scratch: rows padded to kPad elements.
template <class T>
using ScratchMap = Eigen::Map<RowMat<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

constexpr int64_t kBlock = kAttentionRowBlock;

// [Note: deterministic scratch] Eigen vectorizes exp and row sums from the first aligned
// element of a row, so the same row could round differently depending on where it sits in
// memory. Every score row starts on a 64-byte boundary (scratch base aligned, leading
// dimension padded to kPad elements), so results do not depend on which thread ran a block.
constexpr int64_t kPad = 16;  // elements: >= 64 bytes for f32 and f64

int64_t num_row_blocks(int64_t t) { return (t + kBlock - 1) / kBlock; }
int64_t padded(int64_t n) { return (n + kPad - 1) / kPad * kPad; }
// Elements of one score block (kBlock rows of up to T keys).
int64_t score_block(int64_t t) { return kBlock * padded(t); }

template <class T>
T* align_up(T* p) {
  auto a = reinterpret_cast<uintptr_t>(p);
  return reinterpret_cast<T*>((a + 63) / 64 * 64);
}

// Chunks each head's query blocks are cut into for backward (1: whole heads per item). A
// function of the shape alone, never of the thread count: the chunks' partial dK/dV are summed
// at the end, so another split would round differently ([Note: thread-count invariance] in
// matmul.cpp). Heads enough to keep 8 threads busy run whole; fewer are cut into chunks.
constexpr int64_t kSplitThreads = 8;
int64_t backward_splits(int64_t bnh, int64_t t) {
  if (bnh % kSplitThreads == 0 || bnh >= 4 * kSplitThreads) return 1;
  int64_t want = (2 * kSplitThreads + bnh - 1) / bnh;  // ~2 items per thread for balance
  return std::max<int64_t>(1, std::min(want, num_row_blocks(t)));
}

// First query block of chunk s of nsplit (s == nsplit gives nblocks).
int64_t split_begin(int64_t s, int64_t nsplit, int64_t nblocks) {
  return static_cast<int64_t>(std::llround(static_cast<double>(nblocks) *
                                           std::sqrt(static_cast<double>(s) / static_cast<double>(nsplit))));
}

// Query rows [r0, r1) of one head. s: 64-byte aligned scratch of score_block(r1) elements.
template <class T>
void forward_block(int64_t hs, T scale, const T* q, const T* k, const T* v, T* o, T* lse, int64_t r0, int64_t r1,
                   T* s) {
  const int64_t br = r1 - r0, nk = r1;  // rows in this block; keys its last row sees
  ConstMatMap<T> Q(q + r0 * hs, br, hs), K(k, nk, hs), V(v, nk, hs);
  ScratchMap<T> S(s, br, nk, Eigen::OuterStride<>(padded(nk)));
  MatMap<T> O(o + r0 * hs, br, hs);
  S.noalias() = (scale * Q) * K.transpose();  // (br, nk)
  T inv_l[kBlock];
  for (int64_t i = 0; i < br; ++i) {
    const int64_t n = r0 + i + 1;  // row r0+i sees keys [0, n)
    auto seen = S.row(i).head(n);
    const T m = seen.maxCoeff();
    seen = (seen.array() - m).exp().matrix();
    const T l = seen.sum();
    S.row(i).tail(nk - n).setZero();
    inv_l[i] = T(1) / l;
    if (lse) lse[r0 + i] = m + std::log(l);
  }
  O.noalias() = S * V;  // unnormalized P V, then divide each row by its sum
  O.array().colwise() *= Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(inv_l, br);
}

// Query rows [r0, r1) of one head: writes dQ rows, accumulates into dK, dV rows [0, r1).
// p, dp: 64-byte aligned scratch of score_block(r1) elements each.
template <class T>
void backward_block(int64_t hs, T scale, const T* q, const T* k, const T* v, const T* o, const T* lse, const T* dout,
                    T* dq, T* dk, T* dv, int64_t r0, int64_t r1, T* p, T* dp) {
  const int64_t br = r1 - r0, nk = r1;
  ConstMatMap<T> Q(q + r0 * hs, br, hs), K(k, nk, hs), V(v, nk, hs), O(o + r0 * hs, br, hs),
      dO(dout + r0 * hs, br, hs);
  ScratchMap<T> P(p, br, nk, Eigen::OuterStride<>(padded(nk))), dS(dp, br, nk, Eigen::OuterStride<>(padded(nk)));
  MatMap<T> dQ(dq + r0 * hs, br, hs), dK(dk, nk, hs), dV(dv, nk, hs);
  P.noalias() = (scale * Q) * K.transpose();
  for (int64_t i = 0; i < br; ++i) {
    const int64_t n = r0 + i + 1;
    P.row(i).head(n) = (P.row(i).head(n).array() - lse[r0 + i]).exp().matrix();
    P.row(i).tail(nk - n).setZero();
  }
  dS.noalias() = dO * V.transpose();  // dP (br, nk)
  for (int64_t i = 0; i < br; ++i) {
    const T d = dO.row(i).dot(O.row(i));  // rowsum(dO * O) = sum_j P_ij dP_ij
    dS.row(i) = (P.row(i).array() * (dS.row(i).array() - d)).matrix();
  }
  dV.noalias() += P.transpose() * dO;
  dQ.noalias() = (scale * dS) * K;
  dK.noalias() += (scale * dS).transpose() * Q;
}

}  // namespace

int attention_threads(int64_t bnh, int64_t t, int64_t hs) {
  return worth_parallel(bnh * t * t * hs) ? omp_get_max_threads() : 1;
}

int64_t attention_forward_workspace(int64_t bnh, int64_t t, int64_t hs, int threads) {
  return int64_t{threads} * score_block(t) + kPad;  // + kPad: room to align the base
}

int64_t attention_backward_workspace(int64_t bnh, int64_t t, int64_t hs, int threads) {
  int64_t nsplit = backward_splits(bnh, t);
  int64_t partials = nsplit > 1 ? bnh * nsplit * 2 * t * hs : 0;
  return int64_t{threads} * 2 * score_block(t) + kPad + partials;
}

template <class T>
void causal_attention_forward(int64_t bnh, int64_t t, int64_t hs, const T* q, const T* k, const T* v, T* out, T* lse,
                              int threads, T* work) {
  if (bnh == 0 || t == 0 || hs == 0) return;
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
  const int64_t nblocks = num_row_blocks(t), items = bnh * nblocks, per = t * hs;
  T* scratch = align_up(work);
#pragma omp parallel num_threads(threads)
  {
    omp_set_num_threads(1);  // this thread's Eigen products stay single-threaded
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t bh = item / nblocks, blk = nblocks - 1 - item % nblocks;  // heaviest first
      const int64_t r0 = blk * kBlock, r1 = std::min(t, r0 + kBlock);
      T* s = scratch + int64_t{omp_get_thread_num()} * score_block(t);
      forward_block(hs, scale, q + bh * per, k + bh * per, v + bh * per, out + bh * per, lse ? lse + bh * t : nullptr,
                    r0, r1, s);
    }
  }
}

template <class T>
void causal_attention_backward(int64_t bnh, int64_t t, int64_t hs, const T* q, const T* k, const T* v, const T* out,
                               const T* lse, const T* dout, T* dq, T* dk, T* dv, int threads, T* work) {
  if (bnh == 0 || t == 0 || hs == 0) return;
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
  const int64_t nblocks = num_row_blocks(t), nsplit = backward_splits(bnh, t), per = t * hs;
  const int64_t items = bnh * nsplit;
  T* scratch = align_up(work);
  T* partials = scratch + int64_t{threads} * 2 * score_block(t);  // [bnh, nsplit, 2 (dK, dV), T, HS] if nsplit > 1
#pragma omp parallel num_threads(threads)
  {
    omp_set_num_threads(1);  // this thread's Eigen products stay single-threaded
    T* p = scratch + int64_t{omp_get_thread_num()} * 2 * score_block(t);
    T* dp = p + score_block(t);
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t bh = item / nsplit, sp = item % nsplit;
      T* dkb = nsplit == 1 ? dk + bh * per : partials + item * 2 * per;
      T* dvb = nsplit == 1 ? dv + bh * per : dkb + per;
      std::fill(dkb, dkb + per, T(0));
      std::fill(dvb, dvb + per, T(0));
      for (int64_t blk = split_begin(sp, nsplit, nblocks); blk < split_begin(sp + 1, nsplit, nblocks); ++blk) {
        const int64_t r0 = blk * kBlock, r1 = std::min(t, r0 + kBlock);
        backward_block(hs, scale, q + bh * per, k + bh * per, v + bh * per, out + bh * per, lse + bh * t,
                       dout + bh * per, dq + bh * per, dkb, dvb, r0, r1, p, dp);
      }
    }
  }
  if (nsplit == 1) return;
  // Sum the chunks' dK, dV: row r of head bh is the sum over chunks of their row r.
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t row = 0; row < bnh * t; ++row) {
    const int64_t bh = row / t, r = row % t;
    T* dkr = dk + row * hs;
    T* dvr = dv + row * hs;
    std::fill(dkr, dkr + hs, T(0));
    std::fill(dvr, dvr + hs, T(0));
    for (int64_t sp = 0; sp < nsplit; ++sp) {
      const T* src = partials + (bh * nsplit + sp) * 2 * per + r * hs;
#pragma omp simd
      for (int64_t c = 0; c < hs; ++c) {
        dkr[c] += src[c];
        dvr[c] += src[per + c];
      }
    }
  }
}

template void causal_attention_forward<float>(int64_t, int64_t, int64_t, const float*, const float*, const float*,
                                              float*, float*, int, float*);
template void causal_attention_forward<double>(int64_t, int64_t, int64_t, const double*, const double*,
                                               const double*, double*, double*, int, double*);
template void causal_attention_backward<float>(int64_t, int64_t, int64_t, const float*, const float*, const float*,
                                               const float*, const float*, const float*, float*, float*, float*, int,
                                               float*);
template void causal_attention_backward<double>(int64_t, int64_t, int64_t, const double*, const double*,
                                                const double*, const double*, const double*, const double*, double*,
                                                double*, double*, int, double*);

}  // namespace zdl::kernels::cpu

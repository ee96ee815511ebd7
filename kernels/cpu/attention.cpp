// Causal attention kernels (see attention.h for the saved-state choice).
//
// Work is split into independent items run by one OpenMP loop with dynamic scheduling, and
// each item does its matrix products on its own thread (gemm_on_this_thread: zerodl's AVX2
// kernel where that is the f32 GEMM back end, single-threaded Eigen otherwise; each thread of
// the region sets its own nthreads ICV to 1, which is what Eigen reads, so Eigen never starts a
// nested team). The products read the [T, HS] slices of one (b, h) in place; row-major Maps
// view them for the row-wise softmax steps.
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
//
// bf16 buffers: each item converts the rows it reads to f32 in its thread's scratch (the query
// block, the keys and values it sees, and in backward the block's O and dO), runs the f32 code
// on them and rounds what it writes once; dK/dV accumulate in f32 and are rounded once: when a
// whole-head item is done, or by the final sum of a head's chunks. So the results are the f32
// kernel's on the same values, rounded (backward reads the saved output as rounded to bf16).
#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/compute_type.h"
#include "kernels/cpu/eigen.h"
#include "kernels/cpu/matmul.h"
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
// Columns the final dK/dV sum of backward adds up at a time (on the stack).
constexpr int64_t kMaxSumWidth = 64;

int64_t num_row_blocks(int64_t t) { return (t + kBlock - 1) / kBlock; }
int64_t padded(int64_t n) { return (n + kPad - 1) / kPad * kPad; }
// Elements of one score block (kBlock rows of up to T keys).
int64_t score_block(int64_t t) { return kBlock * padded(t); }

template <class T>
T* align_up(T* p) {
  auto a = reinterpret_cast<uintptr_t>(p);
  return reinterpret_cast<T*>((a + 63) / 64 * 64);
}

// Elements of one thread's conversion scratch (bf16 buffers only): forward converts a query
// block and the keys and values it sees and writes an output block; backward converts q, o, dO
// blocks and k, v, writes a dQ block, and accumulates dK and dV of a head. Each part padded to
// kPad elements, so every part starts 64-byte aligned.
int64_t forward_convert(int64_t t, int64_t hs) { return 2 * padded(kBlock * hs) + 2 * padded(t * hs); }
int64_t backward_convert(int64_t t, int64_t hs) { return 4 * padded(kBlock * hs) + 4 * padded(t * hs); }

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

// Query rows [r0, r1) of one head: q and o point at row r0, k and v at row 0, lse (or null) at
// entry r0. s: 64-byte aligned scratch of score_block(r1) elements.
template <class T>
void forward_block(int64_t hs, T scale, const T* q, const T* k, const T* v, T* o, T* lse, int64_t r0, int64_t r1,
                   T* s) {
  const int64_t br = r1 - r0, nk = r1, ld = padded(nk);  // rows in this block; keys its last row sees
  ScratchMap<T> S(s, br, nk, Eigen::OuterStride<>(ld));
  gemm_on_this_thread<T>(br, nk, hs, false, q, hs, true, k, hs, s, ld, false);  // Q K^T (br, nk)
  T inv_l[kBlock];
  for (int64_t i = 0; i < br; ++i) {
    const int64_t n = r0 + i + 1;  // row r0+i sees keys [0, n)
    auto seen = S.row(i).head(n);
    seen *= scale;
    const T m = seen.maxCoeff();
    seen = (seen.array() - m).exp().matrix();
    const T l = seen.sum();
    S.row(i).tail(nk - n).setZero();
    inv_l[i] = T(1) / l;
    if (lse) lse[i] = m + std::log(l);
  }
  gemm_on_this_thread<T>(br, hs, nk, false, s, ld, false, v, hs, o, hs, false);  // unnormalized P V
  MatMap<T>(o, br, hs).array().colwise() *= Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(inv_l, br);
}

// Query rows [r0, r1) of one head: writes dQ rows, accumulates into dK, dV rows [0, r1). q, o,
// dout and dq point at row r0, k, v, dk and dv at row 0, lse at entry r0.
// p, dp: 64-byte aligned scratch of score_block(r1) elements each.
template <class T>
void backward_block(int64_t hs, T scale, const T* q, const T* k, const T* v, const T* o, const T* lse, const T* dout,
                    T* dq, T* dk, T* dv, int64_t r0, int64_t r1, T* p, T* dp) {
  const int64_t br = r1 - r0, nk = r1, ld = padded(nk);
  ConstMatMap<T> O(o, br, hs), dO(dout, br, hs);
  ScratchMap<T> P(p, br, nk, Eigen::OuterStride<>(ld)), dS(dp, br, nk, Eigen::OuterStride<>(ld));
  gemm_on_this_thread<T>(br, nk, hs, false, q, hs, true, k, hs, p, ld, false);  // Q K^T
  for (int64_t i = 0; i < br; ++i) {
    const int64_t n = r0 + i + 1;
    P.row(i).head(n) = (P.row(i).head(n).array() * scale - lse[i]).exp().matrix();
    P.row(i).tail(nk - n).setZero();
  }
  gemm_on_this_thread<T>(br, nk, hs, false, dout, hs, true, v, hs, dp, ld, false);  // dP (br, nk)
  for (int64_t i = 0; i < br; ++i) {
    const T d = dO.row(i).dot(O.row(i));  // rowsum(dO * O) = sum_j P_ij dP_ij
    dS.row(i) = (P.row(i).array() * (dS.row(i).array() - d) * scale).matrix();  // dS / sqrt(HS)
  }
  gemm_on_this_thread<T>(nk, hs, br, true, p, ld, false, dout, hs, dv, hs, true);  // dV += P^T dO
  gemm_on_this_thread<T>(br, hs, nk, false, dp, ld, false, k, hs, dq, hs, false);  // dQ = dS K / sqrt(HS)
  gemm_on_this_thread<T>(nk, hs, br, true, dp, ld, false, q, hs, dk, hs, true);    // dK += dS^T Q / sqrt(HS)
}

}  // namespace

int attention_threads(int64_t bnh, int64_t t, int64_t hs) {
  return worth_parallel(bnh * t * t * hs) ? omp_get_max_threads() : 1;
}

template <class T>
int64_t attention_forward_workspace(int64_t bnh, int64_t t, int64_t hs, int threads) {
  (void)bnh;
  const int64_t convert = std::is_same_v<T, compute_t<T>> ? 0 : forward_convert(t, hs);
  return int64_t{threads} * (score_block(t) + convert) + kPad;  // + kPad: room to align the base
}

template <class T>
int64_t attention_backward_workspace(int64_t bnh, int64_t t, int64_t hs, int threads) {
  const int64_t nsplit = backward_splits(bnh, t);
  const int64_t partials = nsplit > 1 ? bnh * nsplit * 2 * t * hs : 0;
  const int64_t convert = std::is_same_v<T, compute_t<T>> ? 0 : backward_convert(t, hs);
  return int64_t{threads} * (2 * score_block(t) + convert) + kPad + partials;
}

template <class T>
void causal_attention_forward(int64_t bnh, int64_t t, int64_t hs, const T* q, const T* k, const T* v, T* out,
                              compute_t<T>* lse, int threads, compute_t<T>* work) {
  using A = compute_t<T>;
  constexpr bool convert = !std::is_same_v<T, A>;
  if (bnh == 0 || t == 0 || hs == 0) return;
  const A scale = A(1) / std::sqrt(static_cast<A>(hs));
  const int64_t nblocks = num_row_blocks(t), items = bnh * nblocks, per = t * hs;
  const int64_t per_thread = score_block(t) + (convert ? forward_convert(t, hs) : 0);
  A* scratch = align_up(work);
#pragma omp parallel num_threads(threads)
  {
    omp_set_num_threads(1);  // this thread's products stay single-threaded
    A* s = scratch + int64_t{omp_get_thread_num()} * per_thread;
    A* qb = s + score_block(t);  // conversion scratch (bf16): q block, o block, keys, values
    A* ob = qb + padded(kBlock * hs);
    A* kb = ob + padded(kBlock * hs);
    A* vb = kb + padded(t * hs);
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t bh = item / nblocks, blk = nblocks - 1 - item % nblocks;  // heaviest first
      const int64_t r0 = blk * kBlock, r1 = std::min(t, r0 + kBlock);
      const T *qh = q + bh * per, *kh = k + bh * per, *vh = v + bh * per;
      A* lse_blk = lse ? lse + bh * t + r0 : nullptr;
      if constexpr (convert) {
        forward_block(hs, scale, load_compute(qh + r0 * hs, (r1 - r0) * hs, qb), load_compute(kh, r1 * hs, kb),
                      load_compute(vh, r1 * hs, vb), ob, lse_blk, r0, r1, s);
        store_compute((r1 - r0) * hs, ob, out + bh * per + r0 * hs);
      } else {
        forward_block(hs, scale, qh + r0 * hs, kh, vh, out + bh * per + r0 * hs, lse_blk, r0, r1, s);
      }
    }
  }
}

template <class T>
void causal_attention_backward(int64_t bnh, int64_t t, int64_t hs, const T* q, const T* k, const T* v, const T* out,
                               const compute_t<T>* lse, const T* dout, T* dq, T* dk, T* dv, int threads,
                               compute_t<T>* work) {
  using A = compute_t<T>;
  constexpr bool convert = !std::is_same_v<T, A>;
  if (bnh == 0 || t == 0 || hs == 0) return;
  const A scale = A(1) / std::sqrt(static_cast<A>(hs));
  const int64_t nblocks = num_row_blocks(t), nsplit = backward_splits(bnh, t), per = t * hs;
  const int64_t items = bnh * nsplit;
  const int64_t per_thread = 2 * score_block(t) + (convert ? backward_convert(t, hs) : 0);
  A* scratch = align_up(work);
  A* partials = scratch + int64_t{threads} * per_thread;  // [bnh, nsplit, 2 (dK, dV), T, HS] if nsplit > 1
#pragma omp parallel num_threads(threads)
  {
    omp_set_num_threads(1);  // this thread's products stay single-threaded
    A* p = scratch + int64_t{omp_get_thread_num()} * per_thread;
    A* dp = p + score_block(t);
    // Conversion scratch (bf16): q, o, dO and dQ blocks; keys, values; dK, dV accumulators.
    A* qb = dp + score_block(t);
    A* ob = qb + padded(kBlock * hs);
    A* gb = ob + padded(kBlock * hs);
    A* dqb = gb + padded(kBlock * hs);
    A* kb = dqb + padded(kBlock * hs);
    A* vb = kb + padded(t * hs);
    A* dka = vb + padded(t * hs);
    A* dva = dka + padded(t * hs);
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t bh = item / nsplit, sp = item % nsplit;
      const int64_t b0 = split_begin(sp, nsplit, nblocks), b1 = split_begin(sp + 1, nsplit, nblocks);
      const T *qh = q + bh * per, *kh = k + bh * per, *vh = v + bh * per, *oh = out + bh * per, *gh = dout + bh * per;
      const A* lh = lse + bh * t;
      // dK, dV of this item: the output itself (f32, one chunk), a partial (several), or the
      // f32 accumulators of a bf16 head, rounded once at the end.
      A* dkb = nsplit > 1 ? partials + item * 2 * per : convert ? dka : reinterpret_cast<A*>(dk + bh * per);
      A* dvb = nsplit > 1 ? dkb + per : convert ? dva : reinterpret_cast<A*>(dv + bh * per);
      std::fill(dkb, dkb + per, A(0));
      std::fill(dvb, dvb + per, A(0));
      const int64_t seen = std::min(t, b1 * kBlock);  // keys and values this item reads
      if constexpr (convert) {
        load_compute(kh, seen * hs, kb);
        load_compute(vh, seen * hs, vb);
      }
      for (int64_t blk = b0; blk < b1; ++blk) {
        const int64_t r0 = blk * kBlock, r1 = std::min(t, r0 + kBlock), n = (r1 - r0) * hs;
        if constexpr (convert) {
          backward_block(hs, scale, load_compute(qh + r0 * hs, n, qb), kb, vb, load_compute(oh + r0 * hs, n, ob),
                         lh + r0, load_compute(gh + r0 * hs, n, gb), dqb, dkb, dvb, r0, r1, p, dp);
          store_compute(n, dqb, dq + bh * per + r0 * hs);
        } else {
          backward_block(hs, scale, qh + r0 * hs, kh, vh, oh + r0 * hs, lh + r0, gh + r0 * hs,
                         reinterpret_cast<A*>(dq + bh * per + r0 * hs), dkb, dvb, r0, r1, p, dp);
        }
      }
      if (convert && nsplit == 1) {
        store_compute(per, dkb, dk + bh * per);
        store_compute(per, dvb, dv + bh * per);
      }
    }
  }
  if (nsplit == 1) return;
  // Sum the chunks' dK, dV: row r of head bh is the sum over chunks of their row r.
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t row = 0; row < bnh * t; ++row) {
    const int64_t bh = row / t, r = row % t;
    A dkr[kMaxSumWidth], dvr[kMaxSumWidth];
    for (int64_t c0 = 0; c0 < hs; c0 += kMaxSumWidth) {
      const int64_t w = std::min(kMaxSumWidth, hs - c0);
      std::fill(dkr, dkr + w, A(0));
      std::fill(dvr, dvr + w, A(0));
      for (int64_t sp = 0; sp < nsplit; ++sp) {
        const A* src = partials + (bh * nsplit + sp) * 2 * per + r * hs + c0;
#pragma omp simd
        for (int64_t c = 0; c < w; ++c) {
          dkr[c] += src[c];
          dvr[c] += src[per + c];
        }
      }
      store_compute(w, dkr, dk + row * hs + c0);
      store_compute(w, dvr, dv + row * hs + c0);
    }
  }
}

#define ZDL_INSTANTIATE(T)                                                                                          \
  template int64_t attention_forward_workspace<T>(int64_t, int64_t, int64_t, int);                                 \
  template int64_t attention_backward_workspace<T>(int64_t, int64_t, int64_t, int);                                \
  template void causal_attention_forward<T>(int64_t, int64_t, int64_t, const T*, const T*, const T*, T*,            \
                                            compute_t<T>*, int, compute_t<T>*);                                    \
  template void causal_attention_backward<T>(int64_t, int64_t, int64_t, const T*, const T*, const T*, const T*,     \
                                             const compute_t<T>*, const T*, T*, T*, T*, int, compute_t<T>*);
ZDL_INSTANTIATE(float)
ZDL_INSTANTIATE(double)
ZDL_INSTANTIATE(BFloat16)
#undef ZDL_INSTANTIATE

}  // namespace zdl::kernels::cpu

#include "kernels/cpu/square_sum.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/parallel.h"

namespace zdl::kernels::cpu {

// Per-exponent accumulators: bucket e (the biased f32 exponent, subnormals in bucket 1) holds
// the sum of m^2 for the values with that exponent; each value's square is m^2 * 2^(2(e-1))
// in units of 2^-298. A bucket holds < 2^48 per value, so 128 bits take 2^80 values.
struct ExactSquareSum::Buckets {
  unsigned __int128 b[256] = {};
  uint64_t nan = 0, inf = 0;
};

namespace {
// Fixed chunks (not one per thread): every chunk's buckets are merged into the total by
// integer addition, so the thread count cannot change the result (nor could the order).
constexpr int64_t kChunk = 1 << 16;
}  // namespace

// Bucket e's sum lands at bit 2(e-1) of the fixed-point integer: added 32 bits at a time into
// the digits (each add < 2^32, carries settled once at the end).
void ExactSquareSum::add_buckets(const Buckets& bk) {
  std::array<uint64_t, kWords + 5> acc{};  // room for the top bucket's spill past the last word
  for (int e = 1; e < 255; ++e) {
    const unsigned __int128 v = bk.b[e];
    if (!v) continue;
    const int shift = 2 * (e - 1), word = shift / 32, bit = shift % 32;
    const unsigned __int128 lo = v << bit;                                  // low 128 bits
    const uint64_t hi = bit ? static_cast<uint64_t>(v >> (128 - bit)) : 0;  // the rest
    for (int k = 0; k < 4; ++k) acc[static_cast<size_t>(word + k)] += static_cast<uint32_t>(lo >> (32 * k));
    acc[static_cast<size_t>(word + 4)] += hi;
  }
  uint64_t carry = 0;
  for (size_t k = 0; k < acc.size(); ++k) {
    const uint64_t t = acc[k] + carry;
    if (k < static_cast<size_t>(kWords)) w_[k] += t & 0xffffffffu;
    else ZDL_CHECK(t == 0, "ExactSquareSum: overflow");
    carry = t >> 32;
  }
  nan_ += bk.nan;
  inf_ += bk.inf;
  normalize();
}

// One chunk (at most kChunk values) into bk. Its squares are first summed in 64 bits, which
// cannot wrap: m^2 < 2^48 and a chunk has at most 2^16 values. Each block's exponents and
// squares come from a loop the compiler vectorizes; four tables taken in turn then keep
// neighbours with the same exponent (the common case) from waiting on each other's stores.
// Exponent 255 (NaN, Inf) lands in entry 255, which no bucket reads: its values are counted
// by a second pass over the rare chunk that has any.
template <class T, class Bits>
void ExactSquareSum::add_chunk(Buckets& bk, const T* x, int64_t n, Bits bits_of) {
  uint64_t t[4][256] = {};
  constexpr int64_t kBlock = 256;
  alignas(64) uint32_t idx[kBlock];
  alignas(64) uint64_t sq[kBlock];
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t len = std::min(kBlock, n - b);
    for (int64_t i = 0; i < len; ++i) {  // vectorized: exponents and squares of a block
      const uint32_t u = bits_of(x[b + i]);
      const uint32_t e = (u >> 23) & 0xffu;
      const uint64_t m = (u & 0x7fffffu) | (e ? 0x800000u : 0u);
      idx[i] = e + (e == 0);  // subnormals (e = 0) share bucket 1: the same units
      sq[i] = m * m;
    }
    int64_t i = 0;
    for (; i + 4 <= len; i += 4)
      for (int k = 0; k < 4; ++k) t[k][idx[i + k]] += sq[i + k];
    for (; i < len; ++i) t[0][idx[i]] += sq[i];
  }
  for (int e = 1; e < 255; ++e)
    bk.b[e] += static_cast<unsigned __int128>(t[0][e]) + t[1][e] + t[2][e] + t[3][e];
  if ((t[0][255] | t[1][255] | t[2][255] | t[3][255]) == 0) return;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = bits_of(x[i]);
    if (((u >> 23) & 0xffu) == 0xffu) ((u & 0x7fffffu) ? bk.nan : bk.inf) += 1;
  }
}

template <class T, class Bits>
void ExactSquareSum::add_range(int64_t n, const T* x, Bits bits_of) {
  if (n <= 0) return;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  // One bucket set per thread of parallel_for's team (or one when it runs on this thread).
  const int level = omp_get_level();
  std::vector<Buckets> parts(static_cast<size_t>(std::max(1, omp_get_max_threads())));
  parallel_for(chunks, (n + chunks - 1) / chunks, [&](int64_t c0, int64_t c1) {  // threads only for large n
    Buckets& bk = parts[static_cast<size_t>(omp_get_level() > level ? omp_get_thread_num() : 0)];
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t begin = c * kChunk;
      add_chunk(bk, x + begin, std::min(n - begin, kChunk), bits_of);
    }
  });
  for (const Buckets& bk : parts) add_buckets(bk);  // integer sums: any order
}

void ExactSquareSum::add(int64_t n, const float* x) {
  add_range(n, x, [](float v) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    return u;
  });
}

void ExactSquareSum::add(int64_t n, const BFloat16* x) {
  add_range(n, x, [](BFloat16 v) { return static_cast<uint32_t>(v.bits) << 16; });
}

void ExactSquareSum::merge(const ExactSquareSum& o) {
  for (int k = 0; k < kWords; ++k) w_[static_cast<size_t>(k)] += o.w_[static_cast<size_t>(k)];
  nan_ += o.nan_;
  inf_ += o.inf_;
  normalize();
}

void ExactSquareSum::normalize() {
  uint64_t carry = 0;
  for (auto& d : w_) {
    uint64_t t = d + carry;
    d = t & 0xffffffffu;
    carry = t >> 32;
  }
  ZDL_CHECK(carry == 0, "ExactSquareSum: overflow");
}

double ExactSquareSum::value() const {
  if (nan_) return std::numeric_limits<double>::quiet_NaN();
  if (inf_) return std::numeric_limits<double>::infinity();
  // The top three nonzero digits (96 bits) carry more than a double's 53: a pure function of
  // the integer, so equal integers give equal doubles.
  int top = kWords - 1;
  while (top > 0 && w_[static_cast<size_t>(top)] == 0) --top;
  double v = 0.0;
  for (int k = top; k >= std::max(0, top - 2); --k)
    v += std::ldexp(static_cast<double>(w_[static_cast<size_t>(k)]), 32 * k + kLowestExponent);
  return v;
}

std::vector<double> ExactSquareSum::words() const {
  std::vector<double> w(kSerializedSize);
  for (int k = 0; k < kWords; ++k) w[static_cast<size_t>(k)] = static_cast<double>(w_[static_cast<size_t>(k)]);
  w[kWords] = static_cast<double>(nan_);
  w[kWords + 1] = static_cast<double>(inf_);
  return w;
}

ExactSquareSum ExactSquareSum::from_words(const std::vector<double>& w) {
  ExactSquareSum s;
  ZDL_CHECK(static_cast<int>(w.size()) == kSerializedSize, "ExactSquareSum: expected ", kSerializedSize,
            " words, got ", w.size());
  for (int k = 0; k < kWords; ++k) {
    const double d = w[static_cast<size_t>(k)];
    ZDL_CHECK(d >= 0 && d < 9007199254740992.0 && d == std::floor(d), "ExactSquareSum: bad word ", d);
    s.w_[static_cast<size_t>(k)] = static_cast<uint64_t>(d);
  }
  s.nan_ = static_cast<uint64_t>(w[kWords]);
  s.inf_ = static_cast<uint64_t>(w[kWords + 1]);
  s.normalize();
  return s;
}

}  // namespace zdl::kernels::cpu

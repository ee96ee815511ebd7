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

  void add_bits(uint32_t u) {  // u: f32 bits
    const uint32_t e = (u >> 23) & 0xffu, f = u & 0x7fffffu;
    if (e == 0xffu) {
      (f ? nan : inf) += 1;
      return;
    }
    const uint64_t m = e ? (f | 0x800000u) : f;
    b[e ? e : 1] += static_cast<unsigned __int128>(m * m);
  }
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

template <class T, class Bits>
void ExactSquareSum::add_range(int64_t n, const T* x, Bits bits_of) {
  if (n <= 0) return;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  // One bucket set per thread of parallel_for's team (or one when it runs on this thread).
  const int level = omp_get_level();
  std::vector<Buckets> parts(static_cast<size_t>(std::max(1, omp_get_max_threads())));
  parallel_for(chunks, (n + chunks - 1) / chunks, [&](int64_t c0, int64_t c1) {  // threads only for large n
    Buckets& bk = parts[static_cast<size_t>(omp_get_level() > level ? omp_get_thread_num() : 0)];
    for (int64_t i = c0 * kChunk, end = std::min(n, c1 * kChunk); i < end; ++i) bk.add_bits(bits_of(x[i]));
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

// ExactSquareSum: the sum of squares of f32 / bf16 values, exactly, as a wide fixed-point
// integer, so the gradient norm has the same bits however the values are split across
// threads, units and ranks (see docs/exactness.md).
//
// Why it is exact: an f32 value is m * 2^(e-150) with a 24-bit integer m, so its square is
// m^2 * 2^(2e-300): a 48-bit integer times a power of two no smaller than 2^-298 (the square of
// the smallest subnormal). Every square is therefore an integer multiple of 2^-298, and their
// sum is an integer in those units: integer addition is associative, so the order of the
// additions (threads, shards, ranks) cannot change it. bf16 values are truncated f32 values and
// take the same path. The integer is held as kWords 32-bit words; the conversion to double at
// the end is a pure function of the integer, so the norm's bits are too.
//
//   kernels::cpu::ExactSquareSum s;
//   s.add(n, grad);                                     // any number of calls, any split
//   std::vector<double> w = s.words();                  // across ranks: sum element-wise
//   w = comm.all_reduce_sums(w);                        // (each word < 2^32: sums are exact)
//   double sq = kernels::cpu::ExactSquareSum::from_words(w).value();
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace zdl::kernels::cpu {

class ExactSquareSum {
 public:
  // 2^-298 .. 2^310: the squares of every finite f32, summed over up to 2^54 values.
  static constexpr int kWords = 19;
  static constexpr int kLowestExponent = -298;

  // Adds the squares of x[0..n); NaN and Inf are counted, not added. Threads split the range
  // in fixed chunks; the result does not depend on how many there are.
  void add(int64_t n, const float* x);
  void add(int64_t n, const BFloat16* x);
  void merge(const ExactSquareSum& other);

  // The sum as a double (NaN if any value was NaN, +Inf if any was Inf and none NaN).
  double value() const;
  bool finite() const { return nan_ == 0 && inf_ == 0; }

  // kWords words (each < 2^32) then the NaN and Inf counts, as doubles: element-wise sums of
  // these over ranks (in any order) are exact while fewer than 2^21 ranks add them.
  std::vector<double> words() const;
  static ExactSquareSum from_words(const std::vector<double>& w);
  static constexpr int kSerializedSize = kWords + 2;

 private:
  struct Buckets;  // per-exponent sums of one thread's values (square_sum.cpp)
  template <class T, class Bits>
  void add_range(int64_t n, const T* x, Bits bits_of);
  template <class T, class Bits>
  static void add_chunk(Buckets& bk, const T* x, int64_t n, Bits bits_of);
  void add_buckets(const Buckets& b);
  void normalize();
  std::array<uint64_t, kWords> w_{};  // little-endian 32-bit digits (carries pending until normalize)
  uint64_t nan_ = 0, inf_ = 0;
};

}  // namespace zdl::kernels::cpu

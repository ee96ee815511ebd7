// Parameter initialization recipes, evaluated element by element from the counter-based RNG.
//
// A recipe plus (seed, stream) defines every element of a parameter independently, so the
// partition manager can initialize only a shard [begin, begin + n) of the flattened parameter
// and get bits identical to the same slice of a full, single-process init.
//
//   Init::normal(0.0, 0.02)    Init::zeros()    Init::uniform(-k, k)
#pragma once
#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace zdl::nn {

struct Init {
  enum class Kind { Constant, Normal, Uniform };
  Kind kind = Kind::Constant;
  double a = 0.0;  // constant value / mean / low
  double b = 0.0;  // - / stddev / high

  static Init zeros() { return {Kind::Constant, 0.0, 0.0}; }
  static Init ones() { return {Kind::Constant, 1.0, 0.0}; }
  static Init constant(double v) { return {Kind::Constant, v, 0.0}; }
  static Init normal(double mean, double stddev) { return {Kind::Normal, mean, stddev}; }
  static Init uniform(double low, double high) { return {Kind::Uniform, low, high}; }

  std::string str() const;
};

// Writes elements [begin, begin + dst.numel()) of the flattened parameter defined by
// (init, seed, stream) into the contiguous CPU tensor `dst` (any floating dtype).
void init_elements(const Init& init, uint64_t seed, uint64_t stream, int64_t begin, const Tensor& dst);

}  // namespace zdl::nn

// Strict reads of integer fields from parsed JSON (checkpoint manifests, sharded layouts).
//
// nlohmann's get<int64_t>() converts whatever number it finds with a plain cast: a float
// field such as 1e300 or -1.5 becomes undefined behaviour, and get<int>() of a large integer
// silently wraps. Files on disk are untrusted (fuzz_checkpoint feeds them arbitrary bytes), so
// these accept only JSON integers that fit the target type and throw zdl::Error naming the
// field otherwise.
//
//   const int ws = io::json_integer<int>(j.at("world_size"), "world_size");
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/check.h"

namespace zdl::io {

template <class T>
T json_integer(const nlohmann::json& j, const std::string& what) {
  static_assert(std::is_integral_v<T>);
  ZDL_CHECK(j.is_number_integer(), what, " must be an integer, got ", j.dump());
  if (j.is_number_unsigned()) {
    const uint64_t v = j.get<uint64_t>();
    ZDL_CHECK(std::in_range<T>(v), what, " = ", v, " is out of range");
    return static_cast<T>(v);
  }
  const int64_t v = j.get<int64_t>();
  ZDL_CHECK(std::in_range<T>(v), what, " = ", v, " is out of range");
  return static_cast<T>(v);
}

// An object of integers, e.g. TrainState::counters.
template <class T>
std::map<std::string, T> json_integer_map(const nlohmann::json& j, const std::string& what) {
  ZDL_CHECK(j.is_object(), what, " must be an object, got ", j.dump());
  std::map<std::string, T> out;
  for (auto it = j.begin(); it != j.end(); ++it) out[it.key()] = json_integer<T>(*it, what + "[\"" + it.key() + "\"]");
  return out;
}

// An array of integers, e.g. a shape.
template <class T>
std::vector<T> json_integer_array(const nlohmann::json& j, const std::string& what) {
  ZDL_CHECK(j.is_array(), what, " must be an array, got ", j.dump());
  std::vector<T> out;
  for (size_t i = 0; i < j.size(); ++i) out.push_back(json_integer<T>(j[i], what + "[" + std::to_string(i) + "]"));
  return out;
}

}  // namespace zdl::io

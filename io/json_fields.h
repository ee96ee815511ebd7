// Strict reads of integer fields from parsed JSON (checkpoint manifests, sharded layouts), and
// json_shown(), how error messages quote a value read from a file.
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

// A JSON value as an error message quotes it: its text, cut to 200 characters. A container
// nested more than 64 levels deep is only named: json's dump() recurses once per level, and a
// hostile file of a few hundred KB nests deep enough to overflow the stack (the parser and the
// destructor do not recurse; the depth check here does not either).
inline std::string json_shown(const nlohmann::json& j) {
  constexpr int kMaxDepth = 64;
  constexpr size_t kMaxChars = 200;
  std::vector<std::pair<const nlohmann::json*, int>> todo{{&j, 1}};
  while (!todo.empty()) {
    const auto [v, depth] = todo.back();
    todo.pop_back();
    if (!v->is_structured()) continue;
    if (depth > kMaxDepth) return detail::str("(an ", j.type_name(), " nested more than ", kMaxDepth, " levels deep)");
    for (const nlohmann::json& child : *v) todo.emplace_back(&child, depth + 1);
  }
  std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > kMaxChars) text = text.substr(0, kMaxChars) + "...";
  return text;
}

template <class T>
T json_integer(const nlohmann::json& j, const std::string& what) {
  static_assert(std::is_integral_v<T>);
  ZDL_CHECK(j.is_number_integer(), what, " must be an integer, got ", json_shown(j));
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
  ZDL_CHECK(j.is_object(), what, " must be an object, got ", json_shown(j));
  std::map<std::string, T> out;
  for (auto it = j.begin(); it != j.end(); ++it) out[it.key()] = json_integer<T>(*it, what + "[\"" + it.key() + "\"]");
  return out;
}

// An array of integers, e.g. a shape.
template <class T>
std::vector<T> json_integer_array(const nlohmann::json& j, const std::string& what) {
  ZDL_CHECK(j.is_array(), what, " must be an array, got ", json_shown(j));
  std::vector<T> out;
  for (size_t i = 0; i < j.size(); ++i) out.push_back(json_integer<T>(j[i], what + "[" + std::to_string(i) + "]"));
  return out;
}

}  // namespace zdl::io

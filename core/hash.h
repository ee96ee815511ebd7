// FNV-1a, 64-bit (offset basis 0xcbf29ce484222325, prime 0x100000001b3): the one checksum
// zerodl uses for files, data fingerprints, checkpoint train states and cross-rank digests.
// Chain calls to hash a stream: h = fnv1a64(part2, n2, fnv1a64(part1, n1)).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace zdl {

inline constexpr uint64_t kFnv1aOffset = 0xcbf29ce484222325ull;

inline uint64_t fnv1a64(const void* data, size_t n, uint64_t hash = kFnv1aOffset) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) hash = (hash ^ p[i]) * 0x100000001b3ull;
  return hash;
}

inline uint64_t fnv1a64(std::string_view s, uint64_t hash = kFnv1aOffset) { return fnv1a64(s.data(), s.size(), hash); }

}  // namespace zdl

// DataFingerprint; see data_fingerprint.h.
#include "data/data_fingerprint.h"

#include <cstdio>

#include "core/check.h"
#include "core/hash.h"

namespace zdl::data {

std::string DataFingerprint::to_string() const {
  char hex[32];
  std::snprintf(hex, sizeof(hex), "0x%016llx", static_cast<unsigned long long>(fnv1a));
  return detail::str("size=", size, " fnv1a=", hex);
}

DataFingerprint DataFingerprint::parse(const std::string& text) {
  long long size = -1;
  unsigned long long fnv = 0;
  int end = 0;
  const bool ok = std::sscanf(text.c_str(), "size=%lld fnv1a=0x%16llx%n", &size, &fnv, &end) == 2 && size >= 0 &&
                  static_cast<size_t>(end) == text.size();
  ZDL_CHECK(ok, "not a data fingerprint: '", text, "' (expected \"size=<bytes> fnv1a=0x<16 hex digits>\")");
  return {size, fnv};
}

DataFingerprint combine(const std::vector<DataFingerprint>& files) {
  ZDL_CHECK(!files.empty(), "data::combine: no fingerprints to combine");
  if (files.size() == 1) return files[0];
  DataFingerprint all{0, kFnv1aOffset};
  for (const DataFingerprint& f : files) {
    uint8_t le[16];  // size and fnv1a, little-endian: the same hash on any host
    for (int i = 0; i < 8; ++i) {
      le[i] = static_cast<uint8_t>(static_cast<uint64_t>(f.size) >> (8 * i));
      le[8 + i] = static_cast<uint8_t>(f.fnv1a >> (8 * i));
    }
    all.size += f.size;
    all.fnv1a = fnv1a64(le, sizeof(le), all.fnv1a);
  }
  return all;
}

}  // namespace zdl::data

// Unicode classes by range table, and UTF-8 decoding; see unicode_classes.h.
#include "data/unicode_classes.h"

#include <algorithm>
#include <array>
#include <iterator>

namespace zdl::data {

namespace {

struct Range {
  char32_t first, last;
  UnicodeClass cls;
};

constexpr UnicodeClass kLetter = UnicodeClass::Letter;
constexpr UnicodeClass kNumber = UnicodeClass::Number;
constexpr UnicodeClass kSpace = UnicodeClass::Space;

constexpr Range kRanges[] = {
#include "data/unicode_classes.inc"
};

// ASCII's classes, from the same table: one load for most characters of most text.
constexpr std::array<UnicodeClass, 128> kAscii = [] {
  std::array<UnicodeClass, 128> t{};
  for (const Range& r : kRanges)
    for (char32_t c = r.first; c <= r.last && c < 128; ++c) t[c] = r.cls;
  return t;
}();

}  // namespace

UnicodeClass unicode_class(char32_t cp) {
  if (cp < 128) return kAscii[cp];
  // The first range ending at or after cp; cp is in it if it starts at or before cp.
  const Range* r = std::lower_bound(std::begin(kRanges), std::end(kRanges), cp,
                                    [](const Range& range, char32_t c) { return range.last < c; });
  return r != std::end(kRanges) && r->first <= cp ? r->cls : UnicodeClass::Other;
}

Utf8Char utf8_char_at(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(text[k]); };
  const uint8_t b0 = byte(i);
  if (b0 < 0x80) return {b0, 1, true};
  const Utf8Char invalid{b0, 1, false};
  size_t len = 0;
  char32_t cp = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // the second byte's range
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2, cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3, cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4, cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // past U+10FFFF
  } else {
    return invalid;
  }
  if (i + len > text.size()) return invalid;
  for (size_t k = 1; k < len; ++k) {
    const uint8_t b = byte(i + k);
    if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return invalid;
    cp = cp << 6 | (b & 0x3F);
  }
  return {cp, static_cast<uint8_t>(len), true};
}

}  // namespace zdl::data

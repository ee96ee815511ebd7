// GPT-2's pre-tokenization regex, by hand; see gpt2_pretokenizer.h.
#include "data/gpt2_pretokenizer.h"

#include <algorithm>

#include "data/unicode_classes.h"

namespace zdl::data {

namespace {

struct Char {
  UnicodeClass cls;
  size_t len;  // bytes
};

uint8_t byte(std::string_view s, size_t i) { return static_cast<uint8_t>(s[i]); }

// The character at text[i] and its class; a byte that is not well-formed UTF-8 is Other.
Char char_at(std::string_view text, size_t i) {
  const uint8_t b = byte(text, i);
  if (b < 0x80) return {unicode_class(b), 1};
  const Utf8Char c = utf8_char_at(text, i);
  return {c.valid ? unicode_class(c.cp) : UnicodeClass::Other, c.len};
}

// The end of the run of characters of class `cls` that starts at i.
size_t run_end(std::string_view text, size_t i, UnicodeClass cls) {
  while (i < text.size()) {
    const Char c = char_at(text, i);
    if (c.cls != cls) break;
    i += c.len;
  }
  return i;
}

// 's|'t|'re|'ve|'m|'ll|'d at i (case-sensitive, as GPT-2's pattern): its length, or 0.
size_t contraction(std::string_view text, size_t i) {
  if (text[i] != '\'') return 0;
  const std::string_view rest = text.substr(i + 1);
  for (std::string_view c : {"s", "t", "re", "ve", "m", "ll", "d"})
    if (rest.starts_with(c)) return 1 + c.size();
  return 0;
}

bool ascii_not_space(uint8_t b) { return b < 0x80 && unicode_class(b) != UnicodeClass::Space; }

}  // namespace

size_t gpt2_pretoken_end(std::string_view text, size_t begin) {
  if (const size_t n = contraction(text, begin)) return begin + n;
  const Char first = char_at(text, begin);
  // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional space, then a run of one class
  // (the character after the space decides which).
  if (text[begin] == ' ' && begin + 1 < text.size()) {
    const Char next = char_at(text, begin + 1);
    if (next.cls != UnicodeClass::Space) return run_end(text, begin + 1, next.cls);
  }
  if (first.cls != UnicodeClass::Space) return run_end(text, begin, first.cls);
  // `\s+(?!\S)`: the whole run at the end of the text; before a non-space, the run less its
  // last character (which then starts the next pre-token) if that leaves one; else `\s+`.
  size_t last = begin, end = begin + first.len;
  while (end < text.size()) {
    const Char c = char_at(text, end);
    if (c.cls != UnicodeClass::Space) break;
    last = end;
    end += c.len;
  }
  return end < text.size() && last > begin ? last : end;
}

size_t gpt2_split_point(std::string_view text, size_t from) {
  // Cut at p = nl + 1, where text[nl] == '\n'.
  for (size_t nl = text.find('\n', std::max<size_t>(from, 2) - 1); nl != std::string_view::npos && nl + 1 < text.size();
       nl = text.find('\n', nl + 1))
    if (ascii_not_space(byte(text, nl - 1)) && ascii_not_space(byte(text, nl + 1))) return nl + 1;
  return text.size();
}

}  // namespace zdl::data

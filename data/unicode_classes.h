// The Unicode character classes GPT-2's pre-tokenization regex distinguishes (letters \p{L},
// numbers \p{N}, white space \s, everything else), and the strict UTF-8 decoding that the
// tokenizer's pre-tokenizer and its files' readers share.
//
// The classes are a compact range table (data/unicode_classes.inc, about 800 ranges, generated
// by scripts/gen_unicode_classes.py from Python's unicodedata; the file names its Unicode
// version) searched by bisection, with a table for ASCII, which is most of most text. No regex
// or ICU dependency: these classes are all the tokenizer needs.
//
//   data::unicode_class(U'é');                  // UnicodeClass::Letter
//   data::unicode_class(0x0663);                // UnicodeClass::Number (ARABIC-INDIC DIGIT THREE)
//   data::Utf8Char c = data::utf8_char_at("\xC3\xA9!", 0);   // {U'é', 2 bytes, valid}
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace zdl::data {

enum class UnicodeClass : uint8_t { Other, Letter, Number, Space };

// The class of code point `cp`; Other for unassigned code points and anything past 0x10FFFF.
UnicodeClass unicode_class(char32_t cp);

struct Utf8Char {
  char32_t cp;  // the code point; the byte itself when !valid
  uint8_t len;  // bytes taken: 1 to 4 (1 when !valid)
  bool valid;
};

// The character at text[i] (i < text.size()): a well-formed UTF-8 sequence (Unicode's table
// 3-7: no overlong forms, no surrogates, nothing past U+10FFFF), or else the one byte there,
// marked invalid.
Utf8Char utf8_char_at(std::string_view text, size_t i);

}  // namespace zdl::data

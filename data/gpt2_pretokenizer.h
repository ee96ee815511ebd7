// GPT-2's pre-tokenization: the regex that cuts text into the pieces ("pre-tokens") BPE then
// merges within, never across,
//
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// matched by hand on UTF-8 bytes, as the `regex` module (GPT-2's encoder.py) and tiktoken match
// it: at each position the first alternative that matches, each greedy, with \s+(?!\S) backing
// off one character so that a run of white space leaves its last character to the word after
// it ("a   b" -> "a", "  ", " b"). Letters, numbers and white space are Unicode's classes
// (data/unicode_classes.h). Bytes that are not well-formed UTF-8 (a stray continuation byte, a
// truncated or overlong sequence, a surrogate) count one by one as characters of the last
// class, like punctuation, so any bytes pre-tokenize and BPE keeps them (byte-level: every
// byte is a token).
//
//   std::string_view text = "I'm  here";
//   for (size_t i = 0; i < text.size(); i = data::gpt2_pretoken_end(text, i)) ...
//   // "I", "'m", " ", " here"
#pragma once
#include <cstddef>
#include <string_view>

namespace zdl::data {

// The end of the pre-token that starts at `begin` (< text.size()); always > begin.
size_t gpt2_pretoken_end(std::string_view text, size_t begin);

// The first position p >= from (and >= 2) where text can be cut without changing its
// pre-tokens, so that encoding text[0, p) and text[p, end) gives the ids of the whole: just
// after a '\n' that has an ASCII character other than white space on each side. text.size()
// if there is none. For encoding a long text piece by piece.
size_t gpt2_split_point(std::string_view text, size_t from);

}  // namespace zdl::data

// BpeTokenizer: GPT-2's byte-level BPE, read from the files a user supplies, in either of the
// two formats GPT-2's vocabulary is published in:
// - GPT-2's own, a directory with encoder.json and vocab.bpe (OpenAI's release; Hugging Face's
//   vocab.json and merges.txt are the same files, renamed). encoder.json maps every token to its id,
//   each byte of the token written as one printable character (bytes_to_unicode in GPT-2's
//   encoder.py: 'Ġ' is a space); vocab.bpe is a "#version" line, then the merges ("Ġ t"), one
//   a line, in the order BPE learned them.
// - tiktoken's .tiktoken file (e.g. gpt2.tiktoken): one line "base64(token bytes) rank" per
//   token, the rank being the token's id and its merge priority. It holds no special tokens:
//   <|endoftext|> gets the id after the last rank, as in GPT-2 (50256).
//
// encode() cuts the text into GPT-2's pre-tokens (data/gpt2_pretokenizer.h), then, within each,
// starts from its bytes and merges adjacent parts until no merge applies, exactly as the
// format's reference encoder does: GPT-2's encoder.py takes the pair whose merge line comes
// first and merges all its occurrences; tiktoken takes a pre-token that is a token as it is, or
// else merges the pair whose concatenation has the lowest rank (the leftmost on ties), one at a
// time. On GPT-2's vocabulary (and on the vocabularies the tests train) the two give the same
// ids; other files can make them differ, e.g. with merge lines out of the order learned. Every
// byte is a token, so any bytes, UTF-8 or not, encode, and decode gives them back.
// The text is ordinary text: "<|endoftext|>" in it is encoded as characters, never as the
// end-of-text token (whose id the caller inserts, e.g. between documents).
//
//   data::BpeTokenizer tok = data::BpeTokenizer::load("gpt2.tiktoken");   // or a directory
//   std::vector<int64_t> ids = tok.encode("Hello world");                 // {15496, 995}
//   std::string text = tok.decode(ids);                                    // "Hello world"
//   tok.vocab_size();  tok.eot_id();                                       // 50257, 50256
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace zdl::data {

class BpeTokenizer {
 public:
  // The tokenizer at `path`: a directory holding encoder.json and vocab.bpe; the path of
  // either of those two files (the other is read beside it); or a .tiktoken file (any other
  // file is read as one). Throws zdl::Error naming the file (and the line, in vocab.bpe and
  // .tiktoken files) for a missing or unreadable file and for malformed content: bad JSON or
  // base64, an id that is negative or repeated or leaves a gap (ids run from 0), a repeated
  // token or merge, a character outside GPT-2's byte alphabet, a merge of or into a token the
  // vocabulary lacks, a byte with no token.
  static BpeTokenizer load(const std::string& path);
  static BpeTokenizer from_gpt2_files(const std::string& encoder_json, const std::string& vocab_bpe);
  static BpeTokenizer from_tiktoken(const std::string& path);

  // What it was read from, for messages.
  const std::string& source() const { return source_; }
  // Ids run from 0 to vocab_size() - 1 (the end-of-text token included).
  int64_t vocab_size() const { return static_cast<int64_t>(tokens_.size()); }
  // The id of <|endoftext|>, if the vocabulary has it (a .tiktoken one always does).
  std::optional<int64_t> eot_id() const;

  std::vector<int64_t> encode(std::string_view text) const;
  // Ids -> bytes. Throws zdl::Error naming the position and value of the first id outside
  // [0, vocab_size()).
  std::string decode(const std::vector<int64_t>& ids) const;

 private:
  struct Merge {
    int32_t rank;  // priority: lower merges first
    int32_t id;    // the token it makes
  };
  struct TransparentHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct MergeScratch;
  enum class MergeRule : uint8_t { Gpt2, Tiktoken };  // see [Note: merging a pre-token]

  BpeTokenizer() = default;
  // The id of a token's bytes, or -1.
  int32_t id_of(std::string_view bytes) const;
  // Appends the ids of one pre-token.
  void encode_piece(std::string_view piece, MergeScratch& scratch, std::vector<int64_t>& out) const;
  // The checks and tables both formats share, once tokens_ and ids_ are filled: every byte a
  // token, the end-of-text id.
  void finish();

  std::string source_;
  std::vector<std::string> tokens_;                                                 // by id: the bytes
  std::unordered_map<std::string, int32_t, TransparentHash, std::equal_to<>> ids_;  // bytes -> id
  std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> the merge
  std::array<int32_t, 256> byte_ids_{};
  int64_t eot_ = -1;
  MergeRule rule_ = MergeRule::Gpt2;
};

}  // namespace zdl::data

// Byte-level tokenizer: token id = byte value, vocabulary 256.
//
// The simplest lossless tokenizer: any file (UTF-8 or not) encodes and decodes back to the
// same bytes, with no merges file to download. A byte-level GPT needs a longer context than a
// BPE one for the same text, which is the price of running anywhere.
//
//   data::ByteTokenizer tok;
//   std::vector<int64_t> ids = tok.encode("hi");  // {104, 105}
//   std::string s = tok.decode(ids);              // "hi"; ids >= 256 throw
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zdl::data {

class ByteTokenizer {
 public:
  static constexpr int64_t kVocabSize = 256;

  int64_t vocab_size() const { return kVocabSize; }

  // Bytes -> ids in [0, 256), one id per byte.
  std::vector<int64_t> encode(std::string_view bytes) const;

  // Ids -> bytes. Throws zdl::Error naming the position and value of the first id outside
  // [0, 256) (e.g. a sample drawn from the padded part of a model's vocabulary).
  std::string decode(const std::vector<int64_t>& ids) const;
};

// GPT-2-style padded vocabulary: `vocab` rounded up to a multiple of `multiple`, so the
// embedding / LM-head matmuls get friendly shapes (50257 -> 50304 with 128; 256 stays 256).
// nn::GPTConfig::padded_vocab_size is meant to be set from this:
//   cfg.padded_vocab_size = data::padded_vocab(cfg.vocab_size, 128);
// Throws unless vocab >= 1 and multiple >= 1.
int64_t padded_vocab(int64_t vocab, int64_t multiple);

}  // namespace zdl::data

// Byte tokenizer and vocabulary padding; see byte_tokenizer.h.
#include "data/byte_tokenizer.h"

#include <limits>

#include "core/check.h"

namespace zdl::data {

std::vector<int64_t> ByteTokenizer::encode(std::string_view bytes) const {
  std::vector<int64_t> ids(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) ids[i] = static_cast<unsigned char>(bytes[i]);
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string out(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    ZDL_CHECK(ids[i] >= 0 && ids[i] < kVocabSize, "ByteTokenizer::decode: id ", ids[i], " at position ", i,
              " is outside the byte vocabulary [0, ", kVocabSize,
              "); ids from a padded vocabulary must be masked or clamped before decoding");
    out[i] = static_cast<char>(static_cast<unsigned char>(ids[i]));
  }
  return out;
}

int64_t padded_vocab(int64_t vocab, int64_t multiple) {
  ZDL_CHECK(vocab >= 1, "padded_vocab: vocab must be >= 1, got ", vocab);
  ZDL_CHECK(multiple >= 1, "padded_vocab: multiple must be >= 1, got ", multiple);
  ZDL_CHECK(vocab <= std::numeric_limits<int64_t>::max() - (multiple - 1), "padded_vocab: vocab ", vocab,
            " rounded up to a multiple of ", multiple, " overflows 64 bits");
  return (vocab + (multiple - 1)) / multiple * multiple;
}

}  // namespace zdl::data

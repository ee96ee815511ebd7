// ByteTokenizer: lossless on every byte value; out-of-vocabulary ids are rejected clearly.
#include "data/byte_tokenizer.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "core/check.h"

namespace zdl::data {

TEST(ByteTokenizer, RoundTripsAllByteValues) {
  std::string all;
  for (int v = 0; v < 256; ++v) all += static_cast<char>(v);
  all += all;  // twice, in case the order of bytes mattered
  ByteTokenizer tok;
  std::vector<int64_t> ids = tok.encode(all);
  ASSERT_EQ(ids.size(), all.size());
  for (int v = 0; v < 256; ++v) EXPECT_EQ(ids[static_cast<size_t>(v)], v);
  EXPECT_EQ(tok.decode(ids), all);
  EXPECT_EQ(tok.vocab_size(), 256);
  EXPECT_TRUE(tok.encode("").empty());
}

TEST(ByteTokenizer, DecodeRejectsIdsOutsideTheVocabulary) {
  ByteTokenizer tok;
  try {
    tok.decode({104, 105, 300});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("id 300 at position 2"), std::string::npos) << msg;
  }
  EXPECT_THROW(tok.decode({-1}), Error);
}

TEST(PaddedVocab, RoundsUpToTheMultiple) {
  EXPECT_EQ(padded_vocab(50257, 128), 50304);
  EXPECT_EQ(padded_vocab(256, 128), 256);
  EXPECT_EQ(padded_vocab(257, 128), 384);
  EXPECT_EQ(padded_vocab(1, 64), 64);
  EXPECT_EQ(padded_vocab(100, 1), 100);
  EXPECT_THROW(padded_vocab(0, 128), Error);
  EXPECT_THROW(padded_vocab(256, 0), Error);
  // A vocabulary from a hostile checkpoint config must not overflow the rounding.
  EXPECT_THROW(padded_vocab(INT64_MAX, 128), Error);
  EXPECT_EQ(padded_vocab(INT64_MAX, 1), INT64_MAX);
}

}  // namespace zdl::data

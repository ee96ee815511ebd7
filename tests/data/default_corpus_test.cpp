// The default corpus: deterministic, large enough, and with byte-frequency entropy well above
// what a model that learns its structure reaches.
#include "data/default_corpus.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/hash.h"
#include "data/token_dataset.h"
#include "temp_dir.h"

namespace zdl::data {

namespace {

// Entropy of the byte distribution, in bits/byte.
double unigram_entropy_bits(const std::string& s) {
  std::array<double, 256> count{};
  for (unsigned char c : s) count[c] += 1;
  double h = 0;
  for (double c : count)
    if (c > 0) h -= c / s.size() * std::log2(c / s.size());
  return h;
}

// Entropy of a byte given the previous one, in bits/byte: an upper bound on what a bigram
// model reaches, so it shows there is structure beyond byte frequencies.
double bigram_conditional_entropy_bits(const std::string& s) {
  std::vector<double> pair(256 * 256, 0.0), prev(256, 0.0);
  for (size_t i = 1; i < s.size(); ++i) {
    const unsigned a = static_cast<unsigned char>(s[i - 1]), b = static_cast<unsigned char>(s[i]);
    pair[a * 256 + b] += 1;
    prev[a] += 1;
  }
  const double n = static_cast<double>(s.size() - 1);
  double h = 0;
  for (unsigned a = 0; a < 256; ++a)
    for (unsigned b = 0; b < 256; ++b)
      if (pair[a * 256 + b] > 0) h -= pair[a * 256 + b] / n * std::log2(pair[a * 256 + b] / prev[a]);
  return h;
}

}  // namespace

TEST(DefaultCorpus, IsDeterministicAndLargeEnough) {
  const std::string a = default_corpus(), b = default_corpus();
  EXPECT_EQ(a, b);
  EXPECT_GE(static_cast<int64_t>(a.size()), kDefaultCorpusMinBytes);
  EXPECT_LT(static_cast<int64_t>(a.size()), kDefaultCorpusMinBytes + 1024);
  EXPECT_EQ(a.back(), '\n');
  // Printable ASCII and newlines only.
  for (unsigned char c : a) ASSERT_TRUE(c == '\n' || (c >= 32 && c < 127)) << int(c);
  // Each kind of paragraph is present.
  for (const char* needle : {"the foxes ", " runs ", " = ", "count from ", "now ", "pattern: ", "q: what is "})
    EXPECT_NE(a.find(needle), std::string::npos) << needle;
  // Pin the bytes: a change to the generator changes the fingerprint of every checkpoint
  // trained on it, so it should be deliberate (update the value here and say so).
  const uint64_t h = fnv1a64(reinterpret_cast<const uint8_t*>(a.data()), a.size());
  std::printf("default corpus: %zu bytes, fnv1a=0x%016llx\n", a.size(), static_cast<unsigned long long>(h));
  EXPECT_EQ(a.size(), 524288u);
  EXPECT_EQ(h, 0xe8dafb30b1f15054ull);
}

TEST(DefaultCorpus, UnigramEntropyIsWellAboveItsBigramEntropy) {
  const std::string text = default_corpus();
  const double h1 = unigram_entropy_bits(text);
  const double h2 = bigram_conditional_entropy_bits(text);
  std::printf("default corpus: unigram entropy %.3f bits/byte, bigram conditional %.3f bits/byte\n", h1, h2);
  // Documented in default_corpus.h as "about 4.6 bits/byte".
  EXPECT_GT(h1, 4.3);
  EXPECT_LT(h1, 4.9);
  // Even a bigram model beats byte frequencies by a wide margin; a GPT goes much further.
  EXPECT_LT(h2, h1 - 1.0);
}

TEST(DefaultCorpus, WrittenFileMatchesAndFeedsATokenDataset) {
  testing::TempDir dir;
  const std::string path = dir.file("corpus.txt");
  write_default_corpus(path);
  write_default_corpus(path);  // overwriting is fine
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), default_corpus());
  // The default training shape fits in both splits.
  TokenDataset ds(path, {.batch_size = 8, .seq_len = 256, .val_fraction = 0.1});
  EXPECT_GE(ds.num_eval_batches(Split::Val), 20);
  EXPECT_THROW(write_default_corpus(dir.file("no/such/dir/corpus.txt")), Error);
}

// The cached copy in $TMPDIR is checked byte for byte: one of the same size with other bytes
// was trained on as the corpus (the check compared sizes only).
TEST(DefaultCorpus, TheCachedFileIsRewrittenWhenItsBytesDiffer) {
  testing::TempDir dir;
  const char* old = std::getenv("TMPDIR");
  const std::string saved = old ? old : "";
  ::setenv("TMPDIR", dir.path().c_str(), 1);
  const std::string corpus = default_corpus();
  const std::string path = default_corpus_file();
  EXPECT_EQ(path, dir.file("zerodl-default-corpus.txt"));
  for (const std::string& wrong : {std::string(corpus.size(), 'x'), corpus.substr(0, 100), corpus + "more"}) {
    std::ofstream(path, std::ios::binary) << wrong;
    EXPECT_EQ(default_corpus_file(), path);
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    EXPECT_TRUE(ss.str() == corpus) << "a cached copy of " << wrong.size() << " bytes was kept";
  }
  if (old) ::setenv("TMPDIR", saved.c_str(), 1);
  else ::unsetenv("TMPDIR");
}

}  // namespace zdl::data

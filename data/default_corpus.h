// The default corpus: English-like text generated in code, so train_gpt runs with no download.
//
// All text is original, written from small word lists and templates in default_corpus.cpp,
// and drawn with the counter-based Philox RNG under a fixed seed: the same bytes on every
// machine, compiler and build. It is built to have structure a small byte-level GPT can
// learn, at several difficulties:
//   - subject-verb agreement ("the red fox runs ..." / "the red foxes run ...")
//   - counting in digits and in words, days and months in order
//   - arithmetic lines ("12 + 7 = 19", "15 - 8 = 7", "6 * 4 = 24")
//   - short stories that carry state ("ada has 5 apples ... now ada has 3 apples.")
//   - repeated patterns ("abc abc abc")
// Size: 524,288 bytes (generation stops at the first paragraph end at or past
// kDefaultCorpusMinBytes = 512 KiB; it happens to land exactly on it).
// Unigram (byte-frequency) entropy: 4.57 bits/byte = 3.17 nats/byte; a bigram model already
// reaches 3.18 bits/byte = 2.21 nats/byte (tests/data/default_corpus_test.cpp computes both).
// A validation loss well under 3.17 nats/byte shows a model learned more than byte
// frequencies; one that learns agreement, counting and the sums gets far below 2.21.
//
//   std::string text = data::default_corpus();
//   data::write_default_corpus("/tmp/zdl_corpus.txt");   // then TokenDataset on that path
#pragma once
#include <cstdint>
#include <string>

namespace zdl::data {

constexpr int64_t kDefaultCorpusMinBytes = 512 * 1024;

// The corpus text; deterministic (a pure function of nothing).
std::string default_corpus();

// Writes default_corpus() to `path`, replacing it atomically (a temporary file in the same
// folder, then rename), so several ranks may call this on the same path at once.
// Throws zdl::Error naming the path and the errno text on failure.
void write_default_corpus(const std::string& path);

// The corpus as a file in the system's temporary folder (zerodl-default-corpus.txt), written
// on first use (or when the file there is not the corpus); returns its path. Every rank may
// call it: the write is atomic.
std::string default_corpus_file();

}  // namespace zdl::data

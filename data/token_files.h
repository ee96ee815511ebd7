// TokenFiles: the files of a dataset, memory-mapped and read as one stream of token ids.
//
// A source is one file or a glob(7) pattern ('shards/tiny_train_*.bin', expanded here, not by
// a shell) whose matches are read in byte order of their names. Each file is a text file (its
// bytes are the tokens, ids < 256) or an llm.c shard (uint16 GPT-2 ids; data/llmc_shard.h); all
// files of a source must have one format. Headers are checked at open; the tokens themselves
// are read only when a batch touches them (or a scan asks for all of them).
//
// llm.c shards from prepare_tokens are checked against their set's manifest
// (data/shard_manifest.h): a pattern must match the whole set it lists, sizes and checksums
// must match, and a set whose manifest is missing (an interrupted prepare_tokens) is refused.
//
// Token i of the stream is token i - first of the file holding it: file boundaries are
// invisible to readers (TokenDataset's windows cross them; see there why).
//
//   data::TokenFiles files("shards/tiny_train_*.bin");
//   files.format();                        // TokenFormat::Llmc
//   std::vector<int64_t> ids(5);
//   files.read(1000, 5, ids.data());       // tokens [1000, 1005) of the stream
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/data_fingerprint.h"
#include "data/mapped_file.h"

namespace zdl::data {

enum class TokenFormat : uint8_t { Bytes, Llmc };
// "bytes" or "llm.c": as printed, and as a checkpoint's data record names it.
const char* format_name(TokenFormat f);

// True if `source` holds a glob wildcard (*, ?, [) and names no existing file: TokenFiles
// expands it (a file whose name holds such a character is still read as itself).
bool is_glob_pattern(const std::string& source);

struct TokenFile {
  MappedFile mapped;
  const uint8_t* ids = nullptr;  // the first token (bytes: the file's start; llm.c: after the header)
  int64_t count = 0;             // tokens in this file
  int64_t first = 0;             // index of its first token in the stream
};

class TokenFiles {
 public:
  // Expands the pattern, maps every file and checks its header. Throws, naming the file (and
  // the numbers), for a file that cannot be read, a pattern that matches nothing, a bad llm.c
  // header (data/llmc_shard.h), files of mixed formats, or shards that do not match their
  // set's manifest (data/shard_manifest.h).
  explicit TokenFiles(std::string source);

  const std::string& source() const { return source_; }  // as given
  TokenFormat format() const { return format_; }
  const std::vector<TokenFile>& files() const { return files_; }
  int64_t num_tokens() const { return num_tokens_; }

  // Tokens [begin, begin + count) of the stream into out[0, count), across files.
  void read(int64_t begin, int64_t count, int64_t* out) const;

  // Reads every token once: throws at the first id >= vocab, naming its file, its position there
  // and the id, and the largest id of the data (what a vocabulary must exceed).
  void check_ids_below(int64_t vocab) const;
  // The largest token id of the data (0 if it holds none); reads every token once.
  int64_t largest_id() const;

  // Throws, naming the file, if any file's size or modification time changed since open.
  void check_unchanged() const;

  // Each file's fingerprint, in stream order (reads every byte: about a second per GB);
  // combine() them for the data's.
  std::vector<DataFingerprint> file_fingerprints() const;

 private:
  // The id of token i of `f` (0 <= i < f.count).
  int64_t id(const TokenFile& f, int64_t i) const;

  std::string source_;
  TokenFormat format_ = TokenFormat::Bytes;
  std::vector<TokenFile> files_;
  int64_t num_tokens_ = 0;
  std::vector<DataFingerprint> fingerprints_;  // per file, when a manifest's check hashed them all
};

}  // namespace zdl::data

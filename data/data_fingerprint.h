// DataFingerprint: identifies a dataset's contents, to refuse resuming a run on changed data
// and to check that every rank reads the same data.
//
// One file's fingerprint is its size and the FNV-1a 64 of all its bytes. Several files (llm.c
// shards read as one stream) combine theirs: the total size, and FNV-1a over each file's
// (size, fnv1a) in order. Hashing per file keeps the changed file nameable (a checkpoint stores
// every file's fingerprint), and one file's combination is its own fingerprint, so checkpoints
// of single text files still match.
//
//   data::DataFingerprint fp = data::combine({a, b});   // a, b: the files' fingerprints
//   fp.to_string();                                      // "size=1234 fnv1a=0x0123456789abcdef"
//   DataFingerprint::parse(fp.to_string()) == fp;        // true
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace zdl::data {

struct DataFingerprint {
  int64_t size = 0;    // bytes
  uint64_t fnv1a = 0;  // FNV-1a 64 of all bytes (several files: of their fingerprints)
  bool operator==(const DataFingerprint&) const = default;
  std::string to_string() const;  // "size=1234 fnv1a=0x0123456789abcdef"
  // The inverse of to_string() (a checkpoint's record); throws zdl::Error, quoting it, on other text.
  static DataFingerprint parse(const std::string& text);
};

// The fingerprint of files read in this order; one file's is its own. Throws if `files` is empty.
DataFingerprint combine(const std::vector<DataFingerprint>& files);

}  // namespace zdl::data

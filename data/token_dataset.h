// TokenDataset: batches of (inputs, targets) from a memory-mapped token file.
//
// Choices, and why:
// - Tokens are the file's bytes (ByteTokenizer, vocab 256), read through a read-only mmap,
//   so any text file is a dataset and nothing is loaded that a batch does not touch.
// - The file is split by position: the last `val_fraction` of the tokens are validation.
// - A training batch is a pure function of (seed, batch index): row b's window start comes
//   from Philox(key = seed, counter = (index, stream = split<<32 | b)). There is no hidden
//   RNG state, so the data position is just the batch counter; saving position() in a
//   checkpoint and calling set_position() on resume replays exactly the batches that
//   would have followed (see [Note: resumable data]).
// - Ranks slice one global batch: rank r of N takes global rows [r*B/N, (r+1)*B/N), so N
//   ranks together see exactly the batch one process sees with the same B, whatever N.
//   B must be divisible by N (padding rows would change the loss's mean).
// - Evaluation batches are sequential (no randomness): batch i covers tokens
//   [i*B*T, (i+1)*B*T + 1) of the split, rows in order, so an --eval-only run scores the
//   same tokens however it is launched.
//
//   data::TokenDataset ds("input.txt", {.batch_size = 8, .seq_len = 128, .seed = 1337});
//   data::Batch b = ds.next_batch();          // b.inputs, b.targets: [8, 128] I64
//   int64_t pos = ds.position();              // store in the checkpoint; ds.set_position(pos)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/hash.h"
#include "data/mapped_file.h"

namespace zdl::data {

enum class Split : uint8_t { Train = 0, Val = 1 };
const char* split_name(Split s);

struct TokenDatasetOptions {
  int64_t batch_size = 8;     // B: rows of the GLOBAL batch (all ranks together)
  int64_t seq_len = 128;      // T
  double val_fraction = 0.1;  // last fraction of the tokens held out; 0 = no validation split
  uint64_t seed = 1337;
  int64_t rank = 0;           // this process's rows of the global batch ...
  int64_t world_size = 1;     // ... out of N
};

struct Batch {
  Tensor inputs;   // [B/N, T] I64
  Tensor targets;  // [B/N, T] I64: the same windows shifted by one token
};

// Identifies a data file's contents, to refuse resuming a run on a changed file.
struct DataFingerprint {
  int64_t size = 0;    // bytes
  uint64_t fnv1a = 0;  // FNV-1a 64 of all bytes
  bool operator==(const DataFingerprint&) const = default;
  std::string to_string() const;  // "size=1234 fnv1a=0x0123456789abcdef"
};


class TokenDataset {
 public:
  // Maps `path` and checks the options: B, T >= 1; 0 <= val_fraction < 1; 0 <= rank < N;
  // B divisible by N; every non-empty split holds at least B*T + 1 tokens. Errors name the
  // path and the sizes.
  TokenDataset(const std::string& path, const TokenDatasetOptions& opts);

  // Training batch number position() (this rank's rows), then advances the position.
  Batch next_batch();
  // Number of training batches consumed so far; set it on resume.
  int64_t position() const { return position_; }
  void set_position(int64_t batches);

  // Random batch `index` of `split` (this rank's rows); next_batch() is
  // random_batch(Split::Train, position()++). Also usable for sampled validation loss.
  Batch random_batch(Split split, int64_t index) const;
  // File offsets where the GLOBAL rows of random batch `index` start (size B); row b's
  // inputs are bytes [start, start + T), its targets [start + 1, start + T + 1).
  std::vector<int64_t> window_starts(Split split, int64_t index) const;

  // Rows [first, first + count) of training step `step`'s sequences, unsliced (every rank
  // asks for the rows it computes). A step may hold any number of sequences (B x grad_accum);
  // row j's window comes from Philox(key = seed, counter = (step, stream = j)), so the rows are
  // the same however the step is split into ranks and micro-batches, and row j < B of step s
  // is row j of random_batch(Split::Train, s).
  Batch step_rows(int64_t step, int64_t first, int64_t count) const;

  // Sequential batch `index` of `split`: global row b holds tokens
  // [index*B*T + b*T, index*B*T + (b+1)*T + 1) of the split; this rank gets its rows.
  Batch eval_batch(Split split, int64_t index) const;
  // Full sequential batches that fit in the split: (split_size - 1) / (B*T).
  int64_t num_eval_batches(Split split) const;

  int64_t num_tokens() const { return file_.size(); }
  int64_t split_begin(Split s) const { return s == Split::Train ? 0 : train_size_; }
  int64_t split_size(Split s) const { return s == Split::Train ? train_size_ : file_.size() - train_size_; }
  int64_t local_batch_size() const { return opts_.batch_size / opts_.world_size; }
  const TokenDatasetOptions& options() const { return opts_; }
  const std::string& path() const { return file_.path(); }

  // Size + FNV-1a of the whole file (reads every byte: about a second per GB).
  DataFingerprint fingerprint() const;
  // Throws, naming both fingerprints, if the file no longer matches `expected`.
  void expect_fingerprint(const DataFingerprint& expected) const;

 private:
  void check_split(Split s, const char* what) const;
  // Copies this rank's rows of windows starting at `global_starts` (file offsets).
  Batch gather(const std::vector<int64_t>& global_starts) const;
  // Copies `rows` windows starting at starts[0..rows).
  Batch copy_windows(const int64_t* starts, int64_t rows) const;
  // File offset of row `row` of random batch `index` of `split`.
  int64_t window_start(Split split, int64_t index, int64_t row) const;

  MappedFile file_;
  TokenDatasetOptions opts_;
  int64_t train_size_ = 0;
  int64_t position_ = 0;
};

// [Note: resumable data]
// Because batch i depends only on (seed, i), a checkpoint needs only the position (and the
// fingerprint, to catch a different file). Changing world size on resume is fine too: the
// global batch is the same, only how it is sliced changes.

}  // namespace zdl::data

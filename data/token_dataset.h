// TokenDataset: batches of (inputs, targets) from memory-mapped token files.
//
// Choices, and why:
// - The tokens come from data::TokenFiles: text (a file's bytes are its tokens: ByteTokenizer,
//   vocab 256) or llm.c's GPT-2 token shards (uint16 ids; data/llmc_shard.h), one file or a
//   glob pattern of several read as one stream in name order. Files are read through
//   read-only mmaps, so nothing is loaded that a batch does not touch, but for one sequential
//   scan at open that checks every id against the model's vocabulary (`vocab_size`).
// - Windows cross file boundaries: the shards are one stream, as if concatenated. Each llm.c
//   shard begins with the end-of-text token, so a boundary is one more document boundary like
//   the thousands inside every shard, and a window spanning one is as good a sample as one
//   spanning those. It keeps the stream one index space: a window start is one uniform draw
//   over it (every token equally likely, whatever the shards' sizes), the splits are ranges of
//   it, and no tokens are lost at a shard's end.
// - The stream is split by position: the last `val_fraction` of the tokens are validation
//   (of several shards: the end of the last ones).
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
//   data::TokenDataset gpt2("shards/tiny_train_*.bin", {.seq_len = 1024, .vocab_size = 50257});
//   data::Batch b = ds.next_batch();          // b.inputs, b.targets: [8, 128] I64
//   int64_t pos = ds.position();              // store in the checkpoint; ds.set_position(pos)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "data/data_fingerprint.h"
#include "data/token_files.h"

namespace zdl::data {

enum class Split : uint8_t { Train = 0, Val = 1 };
const char* split_name(Split s);

struct TokenDatasetOptions {
  int64_t batch_size = 8;     // B: rows of the GLOBAL batch (all ranks together)
  int64_t seq_len = 128;      // T
  double val_fraction = 0.1;  // last fraction of the tokens held out; 0 = no validation split
  bool val_required = true;   // false: a held-out split too small for one batch is allowed (a run
                              // that never validates keeps the split, so its data order is the same)
  uint64_t seed = 1337;
  int64_t rank = 0;           // this process's rows of the global batch ...
  int64_t world_size = 1;     // ... out of N
  int64_t vocab_size = 0;     // the model's vocabulary: every token id must be below it (0: unchecked)
};

struct Batch {
  Tensor inputs;   // [B/N, T] I64
  Tensor targets;  // [B/N, T] I64: the same windows shifted by one token
};

class TokenDataset {
 public:
  // Reads `files` and checks the options: B, T >= 1; 0 <= val_fraction < 1; 0 <= rank < N;
  // B divisible by N; every non-empty split holds at least B*T + 1 tokens (the val split only if
  // val_required); every id is below vocab_size. Errors name the source (the file, for an id) and
  // the numbers.
  TokenDataset(TokenFiles files, const TokenDatasetOptions& opts);
  // Opens TokenFiles(path_or_pattern) (see there for its errors).
  TokenDataset(const std::string& path_or_pattern, const TokenDatasetOptions& opts);

  // Training batch number position() (this rank's rows), then advances the position.
  Batch next_batch();
  // Number of training batches consumed so far; set it on resume.
  int64_t position() const { return position_; }
  void set_position(int64_t batches);

  // Random batch `index` of `split` (this rank's rows); next_batch() is
  // random_batch(Split::Train, position()++). Also usable for sampled validation loss.
  Batch random_batch(Split split, int64_t index) const;
  // Stream positions where the GLOBAL rows of random batch `index` start (size B); row b's
  // inputs are tokens [start, start + T), its targets [start + 1, start + T + 1).
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

  int64_t num_tokens() const { return files_.num_tokens(); }
  int64_t split_begin(Split s) const { return s == Split::Train ? 0 : train_size_; }
  int64_t split_size(Split s) const { return s == Split::Train ? train_size_ : num_tokens() - train_size_; }
  int64_t local_batch_size() const { return opts_.batch_size / opts_.world_size; }
  const TokenDatasetOptions& options() const { return opts_; }
  const TokenFiles& files() const { return files_; }

  // The data's fingerprint: combine(files().file_fingerprints()) (reads every byte).
  DataFingerprint fingerprint() const;
  // Throws, naming both fingerprints, if the data no longer match `expected`.
  void expect_fingerprint(const DataFingerprint& expected) const;

 private:
  void check_split(Split s, const char* what) const;
  // Copies this rank's rows of windows starting at `global_starts` (stream positions).
  Batch gather(const std::vector<int64_t>& global_starts) const;
  // Copies `rows` windows starting at starts[0..rows).
  Batch copy_windows(const int64_t* starts, int64_t rows) const;
  // Stream position of row `row` of random batch `index` of `split`.
  int64_t window_start(Split split, int64_t index, int64_t row) const;

  TokenFiles files_;
  TokenDatasetOptions opts_;
  int64_t train_size_ = 0;
  int64_t position_ = 0;
};

// [Note: resumable data]
// Because batch i depends only on (seed, i), a checkpoint needs only the position (and the
// fingerprint, to catch different data: a changed file, another set of shards). Changing
// world size on resume is fine too: the global batch is the same, only how it is sliced
// changes.

}  // namespace zdl::data

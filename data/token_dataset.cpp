// TokenDataset; see token_dataset.h for the choices.
#include "data/token_dataset.h"

#include <cmath>
#include <utility>

#include "core/rng.h"

namespace zdl::data {

const char* split_name(Split s) { return s == Split::Train ? "train" : "val"; }

TokenDataset::TokenDataset(const std::string& path_or_pattern, const TokenDatasetOptions& opts)
    : TokenDataset(TokenFiles(path_or_pattern), opts) {}

TokenDataset::TokenDataset(TokenFiles files, const TokenDatasetOptions& opts) : files_(std::move(files)), opts_(opts) {
  const std::string& path = files_.source();
  const int64_t B = opts_.batch_size, T = opts_.seq_len, N = opts_.world_size;
  ZDL_CHECK(B >= 1 && T >= 1, "TokenDataset '", path, "': batch_size and seq_len must be >= 1, got B=", B, " T=", T);
  ZDL_CHECK(N >= 1 && opts_.rank >= 0 && opts_.rank < N, "TokenDataset '", path, "': rank ", opts_.rank,
            " is outside world_size ", N);
  ZDL_CHECK(B % N == 0, "[rank ", opts_.rank, "/", N, "] TokenDataset '", path, "': global batch_size ", B,
            " is not divisible by world_size ", N, "; choose a batch size that is a multiple of ", N,
            " (each rank takes B/N rows)");
  ZDL_CHECK(opts_.val_fraction >= 0.0 && opts_.val_fraction < 1.0, "TokenDataset '", path,
            "': val_fraction must be in [0, 1), got ", opts_.val_fraction);
  const int64_t n = files_.num_tokens();
  const int64_t n_val = static_cast<int64_t>(std::floor(static_cast<double>(n) * opts_.val_fraction));
  train_size_ = n - n_val;
  const int64_t need = B * T + 1;
  ZDL_CHECK(train_size_ >= need, "TokenDataset '", path, "': train split has ", train_size_, " tokens (", n,
            " in all, val_fraction ", opts_.val_fraction, ") but one batch needs B*T+1 = ", B, "*", T, "+1 = ", need,
            "; use more data or a smaller batch_size / seq_len");
  ZDL_CHECK(opts_.val_fraction == 0.0 || !opts_.val_required || n_val >= need, "TokenDataset '", path,
            "': val split has ", n_val, " tokens (", n, " in all, val_fraction ", opts_.val_fraction,
            ") but one batch needs B*T+1 = ", B, "*", T, "+1 = ", need,
            "; use more data, a larger val_fraction, or a smaller batch_size / seq_len");
  if (opts_.vocab_size > 0) files_.check_ids_below(opts_.vocab_size);
}

void TokenDataset::check_split(Split s, const char* what) const {
  ZDL_CHECK(split_size(s) > 0, "TokenDataset '", files_.source(), "': ", what, " of the ", split_name(s),
            " split, which is empty (val_fraction = ", opts_.val_fraction, ")");
}

void TokenDataset::set_position(int64_t batches) {
  ZDL_CHECK(batches >= 0, "TokenDataset::set_position: position must be >= 0, got ", batches);
  position_ = batches;
}

Batch TokenDataset::next_batch() { return random_batch(Split::Train, position_++); }

int64_t TokenDataset::window_start(Split split, int64_t index, int64_t row) const {
  // A window [start, start + T + 1) fits for start in [0, size - T - 1]: size - T choices.
  // 64 random bits mod a count < 2^40 has a negligible bias (< 2^-24).
  const uint64_t choices = static_cast<uint64_t>(split_size(split) - opts_.seq_len);
  const uint64_t stream = (static_cast<uint64_t>(split) << 32) | static_cast<uint64_t>(row);
  auto r = Philox::block(opts_.seed, stream, static_cast<uint64_t>(index));
  const uint64_t bits = (static_cast<uint64_t>(r[1]) << 32) | r[0];
  return split_begin(split) + static_cast<int64_t>(bits % choices);
}

std::vector<int64_t> TokenDataset::window_starts(Split split, int64_t index) const {
  check_split(split, "random batch");
  ZDL_CHECK(index >= 0, "TokenDataset: batch index must be >= 0, got ", index);
  std::vector<int64_t> starts(static_cast<size_t>(opts_.batch_size));
  for (int64_t b = 0; b < opts_.batch_size; ++b) starts[static_cast<size_t>(b)] = window_start(split, index, b);
  return starts;
}

Batch TokenDataset::step_rows(int64_t step, int64_t first, int64_t count) const {
  check_split(Split::Train, "training step");
  ZDL_CHECK(step >= 0 && first >= 0 && count >= 1 && first + count <= (int64_t{1} << 32), "TokenDataset '",
            files_.source(), "': step_rows(step=", step, ", first=", first, ", count=", count, ") is out of range");
  std::vector<int64_t> starts(static_cast<size_t>(count));
  for (int64_t j = 0; j < count; ++j) starts[static_cast<size_t>(j)] = window_start(Split::Train, step, first + j);
  return copy_windows(starts.data(), count);
}

Batch TokenDataset::random_batch(Split split, int64_t index) const { return gather(window_starts(split, index)); }

int64_t TokenDataset::num_eval_batches(Split split) const {
  return split_size(split) > 0 ? (split_size(split) - 1) / (opts_.batch_size * opts_.seq_len) : 0;
}

Batch TokenDataset::eval_batch(Split split, int64_t index) const {
  check_split(split, "eval batch");
  const int64_t B = opts_.batch_size, T = opts_.seq_len;
  const int64_t count = num_eval_batches(split);
  ZDL_CHECK(index >= 0 && index < count, "TokenDataset '", files_.source(), "': eval batch ", index,
            " is out of range; the ", split_name(split), " split (", split_size(split), " tokens) holds ", count,
            " batches of B*T = ", B, "*", T);
  std::vector<int64_t> starts(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) starts[static_cast<size_t>(b)] = split_begin(split) + index * B * T + b * T;
  return gather(starts);
}

Batch TokenDataset::gather(const std::vector<int64_t>& global_starts) const {
  const int64_t rows = local_batch_size();
  return copy_windows(global_starts.data() + opts_.rank * rows, rows);
}

Batch TokenDataset::copy_windows(const int64_t* starts, int64_t rows) const {
  files_.check_unchanged();  // a truncated file would SIGBUS below; a rewritten one feed other tokens
  const int64_t T = opts_.seq_len;
  Batch batch{Tensor::empty({rows, T}, DType::I64), Tensor::empty({rows, T}, DType::I64)};
  int64_t* x = batch.inputs.data<int64_t>();
  int64_t* y = batch.targets.data<int64_t>();
  for (int64_t r = 0; r < rows; ++r) {
    files_.read(starts[r], T, x + r * T);
    files_.read(starts[r] + 1, T, y + r * T);
  }
  return batch;
}

DataFingerprint TokenDataset::fingerprint() const { return combine(files_.file_fingerprints()); }

void TokenDataset::expect_fingerprint(const DataFingerprint& expected) const {
  const DataFingerprint now = fingerprint();
  ZDL_CHECK(now == expected, "TokenDataset: the data '", files_.source(), "' changed since the checkpoint: expected ",
            expected.to_string(), ", found ", now.to_string(),
            "; resume with the original data or start a fresh run");
}

}  // namespace zdl::data

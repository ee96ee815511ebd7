// Training checkpoints: everything needed to resume a run bit-for-bit, in one directory
// (docs/design.md, mechanism 7, single-file flavour; the sharded one builds on the same pieces).
//
//   <dir>/state.safetensors   model.state_dict() under its own names, optimizer.state()
//                             under "optim.<name>" (exp_avg, exp_avg_sq, step, ...)
//   <dir>/checkpoint.json     format + format_version, TrainState, the model's dropout RNG
//                             state, and the byte size and FNV-1a 64 checksum of
//                             state.safetensors
//
// Choices:
// - Crash safety: a save writes a fresh sibling directory "<parent>/.<name>.saving", fsyncs
//   it, then swaps it with <dir> in one atomic renameat2(RENAME_EXCHANGE) and deletes the old
//   one. A crash at any point leaves <dir> holding either the previous checkpoint or the new
//   one, complete; a stale ".saving" directory is ignored by load and removed by the next save.
//   On file systems without RENAME_EXCHANGE, <dir> is first renamed to ".<name>.old" and load
//   falls back to that when <dir> is missing.
// - Integrity: load checks format_version (newer than this build: rejected, saying so), the
//   file size (truncation) and the checksum (corruption) before reading a tensor, then checks
//   every name and shape against the model and optimizer and reports all differences in one
//   error ("checkpoint from a different model") before changing anything.
// - Each dropout module's RNG (nn::Dropout seed, stream and call counter) is saved and
//   restored automatically, so a resumed run draws the same masks even if the model was
//   rebuilt under another init seed; other RNG positions of the training loop go in
//   TrainState::counters.
//
//   io::save_checkpoint("ckpt/latest", *model, opt, {.step = step, .data_position = loader.position()});
//   io::TrainState st = io::load_checkpoint("ckpt/latest", *model, opt);   // st.step == step
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "nn/module.h"
#include "optim/optimizer.h"

namespace zdl::io {

// The version this build writes and the newest it reads.
inline constexpr int64_t kCheckpointFormatVersion = 1;

struct TrainState {
  int64_t step = 0;                             // optimizer steps taken
  int64_t data_position = 0;                    // where the data loader resumes (tokens, batches: caller's unit)
  std::map<std::string, uint64_t> counters;     // RNG seeds / counters of the training loop
  std::map<std::string, std::string> metadata;  // free-form: config JSON, data fingerprint, git hash, ...
  bool operator==(const TrainState&) const = default;
};

// Saves atomically: after it returns, `dir` is the new checkpoint; if it is interrupted,
// `dir` is still the previous one.
void save_checkpoint(const std::string& dir, const nn::Module& model, const optim::Optimizer& optimizer,
                     const TrainState& state);

// Verifies and loads into `model` and `optimizer` (which must have the same parameters,
// shapes and parameter groups as the saved ones); returns the TrainState.
TrainState load_checkpoint(const std::string& dir, nn::Module& model, optim::Optimizer& optimizer);

// Only the TrainState (e.g. to rebuild the model from a config stored in its metadata
// before calling load_checkpoint). Checks the format version, not the tensors.
TrainState read_train_state(const std::string& dir);

// FNV-1a 64 of a file's bytes (the checksum in checkpoint.json).
uint64_t fnv1a64_file(const std::string& path);

}  // namespace zdl::io

// Sharded checkpoints of a ZeRO run, and their consolidation into one GPT-2 file
// (docs/design.md, mechanism 7). The directory:
//
//   <dir>/rank-<r>-of-<N>.safetensors  for every element range rank r owns, the logical master
//                                      values and both Adam moments (f32; f64 in f64 runs):
//                                      "<param>:master@<begin>", "<param>:exp_avg@<begin>",
//                                      "<param>:exp_avg_sq@<begin>", each of shape [n], holding
//                                      the parameter's flat elements [begin, begin + n)
//   <dir>/layout.json                  format + format_version, world size, stage, dtypes,
//                                      optimizer step, the TrainState and its checksum
//                                      (train_state_fnv1a64, version 2), every parameter (name,
//                                      shape, unit, offset), and per rank file its entries
//                                      (param, begin, end), byte size and FNV-1a 64 checksum
//
// Choices:
// - Ownership is block ownership for every stage: rank r writes block r of each unit (the
//   intersection of [r*shard, (r+1)*shard) with each parameter), so even under DDP every
//   element is written exactly once and the write is spread over all ranks.
// - Entries are keyed by parameter name and element index, not by unit or rank, so a load
//   re-shards to any world size, any stage and any unit grouping: each rank reads exactly the
//   elements its master covers (stage 0: the whole unit; 1-3: its block), only those bytes.
// - Crash safety as io/checkpoint.h: rank 0 creates "<parent>/.<name>.saving", every rank
//   writes its file there (atomically), rank 0 writes layout.json and swaps the staging
//   directory into place with one renameat2(RENAME_EXCHANGE). A crash at any point leaves
//   <dir> holding the previous checkpoint or the new one, complete; stale staging is ignored
//   by load and removed by the next save (a save that fails with an error, e.g. a full disk,
//   removes its own). All ranks must see the same file system.
// - Integrity: load checks format_version (newer: rejected, saying so), the train state
//   against its checksum and its ranges (edits of step, optimizer_step, data_position, seed
//   would shift the trajectory silently), every parameter name and shape against the wrapped
//   model (all differences in one error), and the size and checksum of every rank file it
//   reads, before it reads a value.
// - Failures are collective: when any rank fails (a corrupted file only one rank reads, a full
//   disk), every rank throws, naming the file or the failing rank, so none is left waiting
//   in a later collective.
// - Consolidation streams: the GPT-2 file's header is written from the layout first, then
//   one parameter at a time is assembled from the rank files (transposed to Conv1D where
//   GPT-2 wants it) and appended, so memory holds at most one parameter, never the model.
//
//   dist::save_sharded("ckpt/latest", zero, opt, {.step = step, .metadata = {{"config", cfg_json}}});
//   io::TrainState st = dist::load_sharded("ckpt/latest", zero, opt);   // any N, any stage
//   dist::consolidate_sharded("ckpt/latest", "gpt2.safetensors");       // one process
#pragma once
#include <cstdint>
#include <string>

#include "dist/zero/partitioner.h"
#include "dist/zero/zero_adamw.h"
#include "io/checkpoint.h"

namespace zdl::dist {

// The layout version this build writes and the newest it reads. Version 2 adds the train
// state's checksum (`train_state_fnv1a64`); version 1 layouts still load.
inline constexpr int64_t kShardedCheckpointFormatVersion = 2;

// The checksum layout.json keeps of its train state ([Note: train-state checksum]): FNV-1a 64 of
// a canonical form of step, data_position, optimizer_step, counters and metadata, as 16 hex digits.
std::string train_state_checksum(const io::TrainState& state, int64_t optimizer_step);

// Collective: every rank of zero.comm() calls it with the same dir and state. After it
// returns (on every rank) `dir` is the new checkpoint; if interrupted, the previous one.
void save_sharded(const std::string& dir, ZeroPartitioner& zero, const ZeroAdamW& opt, const io::TrainState& state);

// Collective. Verifies the checkpoint against the wrapped model, fills this rank's masters
// and Adam moments (whatever world size and stage saved it), sets the optimizer's step count,
// refreshes the compute-dtype parameters and returns the saved TrainState. On any error every
// rank throws and the run's states are unchanged if the error was found before reading
// values (format, model mismatch, missing, truncated or corrupted files).
io::TrainState load_sharded(const std::string& dir, ZeroPartitioner& zero, ZeroAdamW& opt);

// Only the TrainState (single process, no communicator), e.g. to rebuild the model from the
// config in its metadata before load_sharded. Checks the format version, not the files.
io::TrainState read_sharded_train_state(const std::string& dir);

// Single process: writes `out_path` as one GPT-2 safetensors file (names, Conv1D transposes
// and metadata as io::export_gpt2; f32), loadable by io::load_gpt2 and
// io::config_from_gpt2_file. The checkpoint must come from an nn::GPT and carry its config in
// TrainState::metadata["config"] (JSON with n_head, vocab_size, padded_vocab_size, ... as
// train_gpt writes it). Verifies every rank file; holds one parameter in memory at a time.
void consolidate_sharded(const std::string& dir, const std::string& out_path);

}  // namespace zdl::dist

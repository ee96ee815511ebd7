// Every flag and file of a train_gpt run checked before anything trains (errors are the user's
// input: io::UsageError, exit 2). Every rank checks its own input (a path, a file, a checkpoint
// may differ between hosts) and the ranks agree on the outcome: a problem on one rank ends every
// rank at once with that rank's message ([Note: ranks that disagree] in io/program_flags.h), not
// a hang in the first collective the failed rank never joins.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "data/bpe_tokenizer.h"
#include "data/data_fingerprint.h"
#include "data/token_dataset.h"
#include "dist/comm/communicator.h"
#include "dist/zero/options.h"
#include "examples/train_gpt/args.h"
#include "io/checkpoint.h"
#include "io/dir_lock.h"
#include "io/metrics_log.h"
#include "nn/gpt.h"

namespace zdl::train_gpt {

// What the flags and files make of a run: the model, the data, the checkpoint it resumes.
struct Setup {
  std::optional<io::TrainState> resumed;
  std::vector<std::string> resumed_with_other;  // flags given with other values than the checkpoint's
  nn::GPTConfig cfg;
  DType dtype = DType::F32;
  dist::OffloadOptions offload;  // --offload-optimizer, --offload-params, --offload-dir
  std::string data_path;  // --data: a file or a pattern
  std::unique_ptr<data::TokenDataset> ds;
  std::unique_ptr<io::MetricsLog> metrics;
  std::unique_ptr<io::DirLock> save_lock;    // rank 0's claim on --save, held for the whole run
  std::unique_ptr<io::DirLock> export_lock;  // and on --export-hf, unless it is --save's directory
  std::optional<data::BpeTokenizer> tok;  // --tokenizer
};

// Collective (the ranks agree on the outcome). May change `a`: a resumed run's seed and the run
// settings its command line did not give, the weights file of an --init-from directory.
Setup configure(Args& a, const CLI::App& app, dist::Communicator& comm, Device dev);

// Every rank must read the same data: the same files' bytes, wherever its copies live. Collective.
void check_same_data_on_every_rank(const data::DataFingerprint& fp, int64_t num_files, dist::Communicator& comm);

}  // namespace zdl::train_gpt

// A configured train_gpt run on this rank: the model placed by the partition manager, its
// sharded optimizer and the library's step (dist::Trainer), the data and its fingerprints; and
// what the program does with them besides training: load weights, resume, evaluate, save, export.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "data/data_fingerprint.h"
#include "dist/comm/communicator.h"
#include "dist/zero/trainer.h"
#include "dist/zero/partitioner.h"
#include "dist/zero/zero_adamw.h"
#include "examples/train_gpt/args.h"
#include "examples/train_gpt/configure.h"
#include "io/progress.h"
#include "nn/gpt.h"

namespace zdl::train_gpt {

struct Session {
  const Args& a;
  Setup& s;
  dist::Communicator& comm;
  Device dev;
  dist::ZeroPartitioner& zero;
  nn::GPT& model;
  dist::ZeroAdamW& opt;
  dist::Trainer& trainer;
  std::vector<data::DataFingerprint> file_fps;  // the data's files, in reading order
  data::DataFingerprint data_fp;                // all of them

  bool lead() const { return comm.rank() == 0; }
  data::TokenDataset& ds() const { return *s.ds; }
  // This rank's rows of step `step`, on its device.
  dist::Trainer::Batch step_rows(int64_t step, int64_t first, int64_t count) const;
  // The GPT's mean loss on a micro-batch.
  Tensor loss(const Tensor& inputs, const Tensor& targets) const { return model.loss(inputs, targets); }
};

// The GPT of the config, its parameters placed by `zero` as they are made (the seed fixes their
// init), blocks under activation checkpointing as asked, then wrapped.
std::shared_ptr<nn::GPT> build_model(dist::ZeroPartitioner& zero, const Args& a, const nn::GPTConfig& cfg);

// --init-from, before the optimizer copies the weights: every rank reads its own copy of the
// file (paths may differ between hosts), the ranks agree on the outcome. Collective.
void load_init_from(dist::Communicator& comm, dist::ZeroPartitioner& zero, nn::GPT& model, const std::string& path);

// The mean loss over up to n evaluation batches of `split` (collective), and how many there were.
std::pair<double, int64_t> evaluate(Session& x, data::Split split, int64_t n);

// --resume: the checkpoint's weights and Adam moments; returns the step it saved, from which the
// data and dropout go on. Collective.
int64_t resume(Session& x);

// A checkpoint of everything the run needs to go on exactly after `step` steps. Collective.
void save(Session& x, int64_t step);

// --export-hf: the model as a Hugging Face directory, written by rank 0. Collective. Where the
// write fails, the model is not lost: it is in the final checkpoint (--save), or written to a
// directory of its own in the working directory or $TMPDIR; the run then ends with exit 1 and
// one message saying where the model is.
void export_hf(Session& x, io::Progress& progress);

}  // namespace zdl::train_gpt

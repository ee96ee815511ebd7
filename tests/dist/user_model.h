// A model that is not a GPT, written as a user would (residual MLP classifier with dropout,
// its blocks as ZeRO units through ZeroOptions::is_unit), trained with dist::Trainer: the
// library step gives it the same guarantees train_gpt has.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/rng.h"
#include "dist/comm/local_communicator.h"
#include "dist/checkpoint/sharded_checkpoint.h"
#include "dist/zero/trainer.h"
#include "nn/layers.h"

namespace zdl::dist::testing {

struct MlpBlock : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2;
  std::shared_ptr<nn::Dropout> drop;
  explicit MlpBlock(int64_t d) : nn::Module("MlpBlock") {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(d, 2 * d));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(2 * d, d));
    drop = register_module("drop", std::make_shared<nn::Dropout>(0.1));
  }
  Tensor forward(const Tensor& x) override { return add(x, (*drop)((*fc2)(gelu((*fc1)(x))))); }
};

struct MlpClassifier : nn::Module {
  static constexpr int64_t kIn = 12, kWidth = 16, kClasses = 5;
  std::shared_ptr<nn::Linear> inp, head;
  std::vector<std::shared_ptr<MlpBlock>> blocks;
  MlpClassifier() : nn::Module("MlpClassifier") {
    inp = register_module("inp", std::make_shared<nn::Linear>(kIn, kWidth));
    for (int i = 0; i < 3; ++i)
      blocks.push_back(register_module("block" + std::to_string(i), std::make_shared<MlpBlock>(kWidth)));
    head = register_module("head", std::make_shared<nn::Linear>(kWidth, kClasses));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = (*inp)(x);
    for (auto& b : blocks) h = (*b)(h);
    return (*head)(h);
  }
};

// Rows [first, first + count) of step s: features from Philox keyed by (s, row), the label a
// function of them (a task the model can learn).
inline Trainer::Batch classifier_rows(int64_t s, int64_t first, int64_t count) {
  const int64_t D = MlpClassifier::kIn;
  std::vector<double> x(static_cast<size_t>(count * D));
  std::vector<int64_t> y(static_cast<size_t>(count));
  for (int64_t r = 0; r < count; ++r) {
    Philox g(99, static_cast<uint64_t>(s));
    double acc = 0;
    for (int64_t d = 0; d < D; ++d) {
      double v = g.uniform(static_cast<uint64_t>((first + r) * D + d)) * 2.0 - 1.0;
      x[static_cast<size_t>(r * D + d)] = v;
      acc += (d % 3 == 0 ? v : -0.5 * v);
    }
    y[static_cast<size_t>(r)] = std::clamp<int64_t>(static_cast<int64_t>(std::floor(acc / 0.8)) + 2, 0,
                                                    MlpClassifier::kClasses - 1);  // binned linear score
  }
  return {Tensor::from_vector(x, {count, D}, DType::F32), Tensor::from_vector(y, {count}, DType::I64)};
}

// The classifier under ZeRO on `comm`, trained by dist::Trainer: 8 rows per step in
// micro-batches of 8 / (N x accum) rows.
struct UserModelRun {
  std::unique_ptr<ZeroPartitioner> zero;
  std::shared_ptr<MlpClassifier> model;
  std::unique_ptr<ZeroAdamW> opt;
  std::unique_ptr<Trainer> trainer;

  UserModelRun(Communicator& comm, ZeroStage stage, int64_t accum, uint64_t init_seed = 5) {
    std::shared_ptr<Communicator> shared(&comm, [](Communicator*) {});
    zero = std::make_unique<ZeroPartitioner>(
        shared, ZeroOptions{.stage = stage, .is_unit = [](const nn::Module& m) { return m.type_name() == "MlpBlock"; }});
    {
      auto scope = zero->placement_scope(init_seed);
      model = std::make_shared<MlpClassifier>();
    }
    zero->wrap(*model);
    opt = std::make_unique<ZeroAdamW>(*zero, optim::AdamWOptions{.lr = 1e-2}, 0.01);
    trainer = std::make_unique<Trainer>(
        *zero, *opt, TrainerOptions{.grad_accum = accum, .micro_batch = 8 / (comm.size() * accum), .grad_clip = 0.5, .seed = 3});
  }
  std::vector<double> steps(int from, int to) {
    std::vector<double> losses;
    for (int s = from; s < to; ++s)
      losses.push_back(trainer->step(s, classifier_rows, [&](const Tensor& x, const Tensor& y) {
                                   return cross_entropy((*model)(x), y);
                                 }).loss);
    return losses;
  }
  std::map<std::string, std::vector<double>> params() {
    GatheredParameters g(*zero);
    std::map<std::string, std::vector<double>> out;
    for (auto& [n, p] : model->named_parameters()) out[n] = p.to(DType::F64).to_vector();
    return out;
  }
};

// The user model on N ranks (every stage, accumulation 1 and 2 where it divides) gives one
// process's bits; and its loss goes down.
inline void expect_user_model_identical_at_any_world_size(Communicator& comm) {
  LocalCommunicator local;
  const int N = comm.size();
  auto mean5 = [](auto b) { return (b[0] + b[1] + b[2] + b[3] + b[4]) / 5; };
  for (ZeroStage stage : {ZeroStage::DDP, ZeroStage::One, ZeroStage::Two, ZeroStage::Three})
    for (int64_t accum : {1, 2}) {
      if (8 % (N * accum) != 0) continue;
      UserModelRun one(local, stage, accum * N), got(comm, stage, accum);
      const std::vector<double> want = one.steps(0, 30), losses = got.steps(0, 30);
      EXPECT_EQ(losses, want) << comm.prefix() << " " << stage_name(stage) << " accum " << accum;
      EXPECT_TRUE(got.params() == one.params()) << comm.prefix() << " " << stage_name(stage) << " accum " << accum;
      EXPECT_LT(mean5(losses.end() - 5), mean5(losses.begin())) << comm.prefix() << " the classifier did not learn";
    }
}

// A user model with dropout saved through the sharded-checkpoint API and loaded into a model
// built from another init seed continues the uninterrupted run bit for bit: its dropout masks
// are keyed by the step, which is all the train state needs ([Note: dropout position]).
inline void expect_user_model_resumes_exactly(Communicator& comm, const std::string& dir) {
  for (ZeroStage stage : {ZeroStage::DDP, ZeroStage::Three}) {
    UserModelRun whole(comm, stage, 1);
    const std::vector<double> want = whole.steps(0, 8);
    {
      UserModelRun first(comm, stage, 1);
      first.steps(0, 4);
      save_sharded(dir, *first.zero, *first.opt, io::TrainState{.step = 4});
    }
    UserModelRun resumed(comm, stage, 1, /*init_seed=*/77);
    const io::TrainState st = load_sharded(dir, *resumed.zero, *resumed.opt);
    EXPECT_EQ(resumed.steps(static_cast<int>(st.step), 8), std::vector<double>(want.begin() + 4, want.end()))
        << comm.prefix() << " " << stage_name(stage);
    EXPECT_TRUE(resumed.params() == whole.params()) << comm.prefix() << " " << stage_name(stage);
  }
}

}  // namespace zdl::dist::testing

// A model that is not a GPT, written as a user would (residual MLP classifier with dropout,
// its blocks as ZeRO units through ZeroOptions::is_unit), trained with dist::Trainer: the
// library step gives it the same guarantees train_gpt has.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/rng.h"
#include "dist/local_communicator.h"
#include "dist/trainer.h"
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

struct UserRun {
  std::vector<double> losses;
  std::map<std::string, std::vector<double>> params;
};

// `steps` steps of the classifier under `stage` on `comm`: 8 rows per step in micro-batches
// of 8 / (N x accum) rows.
inline UserRun train_user_model(Communicator& comm, ZeroStage stage, int64_t accum, int steps = 30) {
  std::shared_ptr<Communicator> shared(&comm, [](Communicator*) {});
  ZeroPartitioner zero(shared, {.stage = stage, .is_unit = [](const nn::Module& m) { return m.type_name() == "MlpBlock"; }});
  std::shared_ptr<MlpClassifier> model;
  {
    auto scope = zero.placement_scope(/*seed=*/5);
    model = std::make_shared<MlpClassifier>();
  }
  zero.wrap(*model);
  ZeroAdamW opt(zero, {.lr = 1e-2}, 0.01);
  Trainer trainer(zero, opt, {.grad_accum = accum, .micro_batch = 8 / (comm.size() * accum), .grad_clip = 0.5, .seed = 3});
  UserRun out;
  for (int s = 0; s < steps; ++s)
    out.losses.push_back(trainer.step(s, classifier_rows, [&](const Tensor& x, const Tensor& y) {
                                        return cross_entropy((*model)(x), y);
                                      }).loss);
  GatheredParameters g(zero);
  for (auto& [n, p] : model->named_parameters()) out.params[n] = p.to(DType::F64).to_vector();
  return out;
}

// The user model on N ranks (every stage, accumulation 1 and 2 where it divides) gives one
// process's bits; and its loss goes down.
inline void expect_user_model_identical_at_any_world_size(Communicator& comm) {
  LocalCommunicator local;
  const int N = comm.size();
  for (ZeroStage stage : {ZeroStage::DDP, ZeroStage::One, ZeroStage::Two, ZeroStage::Three})
    for (int64_t accum : {1, 2}) {
      if (8 % (N * accum) != 0) continue;
      UserRun one = train_user_model(local, stage, accum * N);
      UserRun got = train_user_model(comm, stage, accum);
      EXPECT_EQ(got.losses, one.losses) << comm.prefix() << " " << stage_name(stage) << " accum " << accum;
      EXPECT_TRUE(got.params == one.params) << comm.prefix() << " " << stage_name(stage) << " accum " << accum;
      auto mean5 = [](auto b) { return (b[0] + b[1] + b[2] + b[3] + b[4]) / 5; };
      EXPECT_LT(mean5(got.losses.end() - 5), mean5(got.losses.begin())) << comm.prefix() << " the classifier did not learn";
    }
}

}  // namespace zdl::dist::testing

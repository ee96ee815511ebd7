// A model that is not a GPT, written as a user would (residual MLP classifier with dropout,
// its blocks as ZeRO units through ZeroOptions::is_unit), trained with dist::Trainer: the
// library step gives it the same guarantees train_gpt has.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "core/rng.h"
#include "dist/comm/local_communicator.h"
#include "dist/checkpoint/sharded_checkpoint.h"
#include "dist/zero/trainer.h"
#include "nn/layers.h"
#include "nn/parameter_factory.h"
#include "nn/batch_position.h"
#include "optim/param_groups.h"
#include "optim/clip.h"
#include "error_of.h"

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
  // Control flow a user may write: blocks it returns true for are skipped (a branch not taken).
  std::function<bool(size_t block)> skip_block;
  Tensor forward(const Tensor& x) override {
    Tensor h = (*inp)(x);
    for (size_t i = 0; i < blocks.size(); ++i)
      if (!skip_block || !skip_block(i)) h = (*blocks[i])(h);
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

  UserModelRun(Communicator& comm, ZeroStage stage, int64_t accum, uint64_t init_seed = 5,
               const std::function<void(MlpClassifier&)>& before_wrap = {}) {
    std::shared_ptr<Communicator> shared(&comm, [](Communicator*) {});
    zero = std::make_unique<ZeroPartitioner>(
        shared, ZeroOptions{.stage = stage, .is_unit = [](const nn::Module& m) { return m.type_name() == "MlpBlock"; }});
    {
      auto scope = zero->placement_scope(init_seed);
      model = std::make_shared<MlpClassifier>();
    }
    if (before_wrap) before_wrap(*model);
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

// Two losses backwarded in one step, each with gradient sync on (a loop that accumulates .grad
// does this), then the step: every stage gives the same bits. Stage 1 reduces in the full
// gradient buffer, whose other blocks still held this rank's unreduced gradients of the first
// backward, and the second reduce-scatter summed them into the other ranks' blocks (N > 1);
// DDP summed the first backward's replicated mean N times over (rounding).
inline void expect_two_backwards_in_one_step_give_every_stage_the_same_bits(Communicator& comm) {
  std::map<std::string, std::vector<double>> want;
  for (ZeroStage stage : {ZeroStage::Two, ZeroStage::DDP, ZeroStage::One, ZeroStage::Three}) {
    UserModelRun run(comm, stage, 1);
    run.model->eval();  // no dropout: these steps do not go through the Trainer's batch positions
    const int64_t rows = 8 / comm.size();
    for (int s = 0; s < 3; ++s) {
      for (int pass = 0; pass < 2; ++pass) {
        auto [x, y] = classifier_rows(2 * s + pass, comm.rank() * rows, rows);
        cross_entropy((*run.model)(x), y).backward();
      }
      run.opt->step(run.zero->clip_grad_norm(0.5));
      run.zero->zero_grad();
    }
    if (want.empty()) want = run.params();
    else EXPECT_TRUE(run.params() == want) << comm.prefix() << " " << stage_name(stage) << " differs from ZeRO-2";
  }
}

// A block skipped in one step (a branch not taken) under ZeRO-3 with prefetch: the block before
// it gathered it ahead, nothing used it, and it stayed gathered through the optimizer step, so
// the next steps computed with (and GatheredParameters read) its old values. The same bits as DDP.
inline void expect_a_unit_skipped_in_a_step_is_gathered_afresh(Communicator& comm) {
  std::map<std::string, std::vector<double>> want;
  std::vector<double> want_losses;
  for (ZeroStage stage : {ZeroStage::DDP, ZeroStage::Three}) {
    UserModelRun run(comm, stage, 1);
    int step = 0;
    run.model->skip_block = [&step](size_t i) { return i == 1 && step == 1; };
    std::vector<double> losses;
    for (; step < 4; ++step) losses.push_back(run.steps(step, step + 1)[0]);
    if (want.empty()) {
      want = run.params();
      want_losses = losses;
      continue;
    }
    EXPECT_EQ(losses, want_losses) << comm.prefix() << " " << stage_name(stage);
    EXPECT_TRUE(run.params() == want) << comm.prefix() << " " << stage_name(stage) << " differs from DDP";
  }
}

// Evaluation inside GatheredParameters (ZeRO-3): a forward in the scope freed the units it held
// (the units' post-forward reshards them): reading a weight after it failed with "gather them
// with GatheredParameters", a read-only scope reported a write, a modifying scope's write failed.
// An optimizer step inside a scope is refused (its gathered copies would go stale).
inline void expect_a_forward_inside_gathered_parameters_keeps_them(Communicator& comm) {
  UserModelRun run(comm, ZeroStage::Three, 1);
  run.steps(0, 2);
  const int64_t rows = 8 / comm.size();
  auto [x, y] = classifier_rows(9, comm.rank() * rows, rows);
  run.model->eval();
  {
    GatheredParameters g(*run.zero);
    NoGradGuard ng;
    EXPECT_TRUE(std::isfinite(cross_entropy((*run.model)(x), y).item()));
    EXPECT_EQ(run.model->blocks[1]->fc1->weight.to_vector().size(), 2u * 16 * 16);
    EXPECT_NO_THROW(g.release());
  }
  {
    GatheredParameters g(*run.zero, /*modify=*/true);
    NoGradGuard ng;
    (*run.model)(x);
    run.model->blocks[1]->fc1->weight.fill_(0.25);
    g.release();
  }
  const auto params = run.params();
  for (double v : params.at("block1.fc1.weight")) ASSERT_EQ(v, 0.25);
  GatheredParameters g(*run.zero);
  EXPECT_NE(::zdl::testing::error_of([&] { run.opt->step(1.0); }).find("inside a dist::GatheredParameters scope"),
            std::string::npos);
}

// A layer frozen before wrap (fine-tuning) stays as it was at every stage, as in plain training
// (where decay_groups leaves it out of the optimizer): ZeroAdamW's weight decay moved it.
inline void expect_a_frozen_layer_stays_put(Communicator& comm) {
  for (ZeroStage stage : {ZeroStage::DDP, ZeroStage::One, ZeroStage::Two, ZeroStage::Three}) {
    UserModelRun run(comm, stage, 1, 5, [](MlpClassifier& m) { m.inp->weight.set_requires_grad(false); });
    const auto before = run.params();
    run.steps(0, 3);
    const auto after = run.params();
    EXPECT_TRUE(after.at("inp.weight") == before.at("inp.weight")) << comm.prefix() << " " << stage_name(stage);
    EXPECT_FALSE(after.at("inp.bias") == before.at("inp.bias")) << "the layer's bias still trains";
  }
}

// model->forward(x) instead of (*model)(x) skips the root unit's hooks: its gradients landed
// outside ZeRO's buffer and the root never trained (stages 0-2, silently). Now the step says so.
inline void expect_a_forward_without_hooks_is_named(Communicator& comm) {
  for (ZeroStage stage : {ZeroStage::DDP, ZeroStage::One, ZeroStage::Two}) {
    UserModelRun run(comm, stage, 1);
    run.model->eval();
    const int64_t rows = 8 / comm.size();
    auto [x, y] = classifier_rows(0, comm.rank() * rows, rows);
    cross_entropy(run.model->forward(x), y).backward();
    const std::string msg = ::zdl::testing::error_of([&] { run.zero->clip_grad_norm(1.0); });
    EXPECT_NE(msg.find("got its gradient outside ZeRO's buffer"), std::string::npos) << stage_name(stage) << ": " << msg;
    EXPECT_NE(msg.find("call it as (*module)(x), not module->forward(x)"), std::string::npos) << msg;
  }
}

// One process: the classifier with block 1 skipped in step 1, under plain optim::AdamW (which
// skips parameters without a gradient) and every ZeRO stage: the same bits. ZeroAdamW used to
// move the skipped block by its decay and Adam moments.
inline void expect_a_skipped_unit_is_left_as_plain_adamw_leaves_it(Communicator& comm) {
  ASSERT_EQ(comm.size(), 1);
  auto skip = [](const int& step) { return [&step](size_t i) { return i == 1 && step == 1; }; };
  std::map<std::string, std::vector<double>> want;
  {
    std::shared_ptr<MlpClassifier> model;
    {
      nn::InitContext ctx(5);
      model = std::make_shared<MlpClassifier>();
    }
    optim::AdamW opt(optim::decay_groups(*model, 0.01), {.lr = 1e-2});
    int step = 0;
    model->skip_block = skip(step);
    for (; step < 4; ++step) {
      auto [x, y] = classifier_rows(step, 0, 8);
      nn::BatchPosition pos(step, 0, 3);
      cross_entropy((*model)(x), y).backward();
      opt.step(optim::clip_scale(optim::grad_norm(model->parameters()), 0.5));
      opt.zero_grad();
    }
    for (auto& [n, p] : model->named_parameters()) want[n] = p.to(DType::F64).to_vector();
  }
  for (ZeroStage stage : {ZeroStage::DDP, ZeroStage::One, ZeroStage::Two, ZeroStage::Three}) {
    UserModelRun run(comm, stage, 1);
    int step = 0;
    run.model->skip_block = skip(step);
    for (; step < 4; ++step) run.steps(step, step + 1);
    EXPECT_TRUE(run.params() == want) << stage_name(stage) << " differs from plain AdamW";
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

// ZeRO on one rank (LocalCommunicator): every stage is bit-exact with plain training, and the
// memory / traffic ledgers follow the closed forms at N = 1. The same cases run at N = 2, 4
// in tests/dist/mpi/zero_mpi_test.cpp.
#include <algorithm>

#include "user_model.h"
#include "zero_cases.h"
#include "error_of.h"

namespace zdl::dist::testing {

namespace {
Communicator& local() {
  static std::shared_ptr<Communicator> c = dist::init();
  return *c;
}
}  // namespace

TEST(ZeroLocal, EveryStageIsBitExactWithPlainTraining) {
  ASSERT_EQ(local().size(), 1);
  for (ZeroStage s : kAllStages) expect_equivalent(local(), {.stage = s}, 0.0);
}

// docs/exactness.md: no_sync's running local sum has no fixed tree, so exact reduction refuses it.
TEST(ZeroLocal, NoSyncIsRefusedUnderExactReduction) {
  const std::string e = zdl::testing::error_of([&] {
    run_zero(local(), {.stage = ZeroStage::Two, .grad_accum = 2, .reduction = GradReduction::Exact, .no_sync = true});
  });
  EXPECT_NE(e.find("no_sync keeps a running sum"), std::string::npos) << e;
  EXPECT_NE(e.find("GradReduction::Native"), std::string::npos) << e;
}

TEST(ZeroLocal, GradientAccumulationMatches) {
  for (ZeroStage s : kAllStages) expect_equivalent(local(), {.stage = s, .grad_accum = 2}, 0.0);
}

TEST(ZeroLocal, MemoryFollowsClosedForms) {
  for (ZeroStage s : kAllStages)
    for (DType dt : {DType::F32, DType::BF16}) expect_memory_closed_form(local(), s, dt);
}

TEST(ZeroLocal, GptUnitsArePredicted) { expect_gpt_units_predicted(local()); }

TEST(ZeroLocal, TwoBackwardsInOneStepGiveEveryStageTheSameBits) {
  expect_two_backwards_in_one_step_give_every_stage_the_same_bits(local());
}

TEST(ZeroLocal, AUnitSkippedInAStepIsGatheredAfresh) { expect_a_unit_skipped_in_a_step_is_gathered_afresh(local()); }

TEST(ZeroLocal, AForwardInsideGatheredParametersKeepsThem) {
  expect_a_forward_inside_gathered_parameters_keeps_them(local());
}

TEST(ZeroLocal, AFrozenLayerStaysPut) { expect_a_frozen_layer_stays_put(local()); }

TEST(ZeroLocal, AForwardWithoutHooksIsNamed) { expect_a_forward_without_hooks_is_named(local()); }

TEST(ZeroLocal, ASkippedUnitIsLeftAsPlainAdamWLeavesIt) {
  expect_a_skipped_unit_is_left_as_plain_adamw_leaves_it(local());
}

TEST(ZeroLocal, TrafficFollowsClosedForms) {
  for (ZeroStage s : kAllStages) {
    expect_traffic_closed_form(local(), s);
    expect_traffic_closed_form(local(), s, 0, {}, /*grad_accum=*/3);  // every micro-step reduces (exact)
  }
}

TEST(ZeroLocal, ActivationCheckpointingIsBitIdenticalAndKeepsTheTraffic) {
  for (ZeroStage s : kAllStages) {
    expect_checkpointing_identical(local(), s);
    expect_traffic_closed_form(local(), s, /*checkpoint_every=*/1);
  }
}

TEST(ZeroLocal, Zero3ShardsMatchFullInit) { expect_zero3_shards_match_full_init(local()); }

}  // namespace zdl::dist::testing

namespace zdl::dist::testing {

TEST(ZeroLocal, Bf16TracksF32) {
  for (ZeroStage s : kAllStages) expect_bf16_tracks_f32(local(), s);
}

}  // namespace zdl::dist::testing

namespace zdl::dist::testing {

TEST(ZeroLocal, TraceShowsTheUnitLifecycleInOrder) {
  for (ZeroStage stage : {ZeroStage::DDP, ZeroStage::Three}) {
    std::vector<TraceEvent> events;
    Probe probe;
    probe.after_wrap = [&](ZeroPartitioner& z) { z.set_trace([&](const TraceEvent& e) { events.push_back(e); }); };
    run_zero(local(), {.stage = stage, .steps = 1}, probe);
    // The step's events (the harness gathers everything once more after the step).
    auto order = [&](TraceKind k) {
      std::vector<std::string> names;
      for (auto& e : events) {
        if (e.kind == k) names.push_back(e.unit);
        if (e.kind == TraceKind::StepEnd) break;
      }
      return names;
    };
    // Forward: root first (its call wraps the blocks), blocks in order; backward in reverse.
    EXPECT_EQ(order(TraceKind::ForwardBegin), (std::vector<std::string>{"<root>", "h.0", "h.1", "h.2"}));
    EXPECT_EQ(order(TraceKind::BackwardBegin), (std::vector<std::string>{"<root>", "h.2", "h.1", "h.0"}));
    EXPECT_EQ(order(TraceKind::ReduceEnd), (std::vector<std::string>{"h.2", "h.1", "h.0", "<root>"}));
    // ZeRO-3 gathers every unit twice (forward, backward); DDP never.
    EXPECT_EQ(order(TraceKind::GatherIssue).size(), stage == ZeroStage::Three ? 8u : 0u) << stage_name(stage);
    EXPECT_EQ(order(TraceKind::StepEnd).size(), 1u);
    expect_gather_timing_consistent(local(), events);
  }
}

TEST(ZeroLocal, EveryGatherReportsWhenItsBytesArrived) { expect_traced_gathers_timed(local()); }

// [Note: overlapped gradient reduction] in dist/zero/partitioner.cpp: each unit's reduction is issued when
// its gradients are complete and finished when the next unit's is issued, so it spans the
// backward of the previous unit; backward() returns with all of them finished.
TEST(ZeroLocal, GradientReductionsOverlapThePreviousUnitsBackwardAndFinishBeforeBackwardReturns) {
  for (ZeroStage stage : kAllStages) {
    std::shared_ptr<Communicator> shared(&local(), [](Communicator*) {});
    ZeroPartitioner zero(shared, ZeroOptions{.stage = stage});
    std::shared_ptr<nn::GPT> model;
    {
      auto scope = zero.placement_scope(1);
      model = std::make_shared<nn::GPT>(tiny_gpt());
    }
    zero.wrap(*model);
    std::vector<TraceEvent> events;
    zero.set_trace([&](const TraceEvent& e) { events.push_back(e); });
    RunConfig c;
    auto [x, y] = global_batch(c, model->config.vocab_size, 0, 0);
    model->loss(x, y).backward();
    auto index = [&](TraceKind k, const std::string& unit) {
      for (size_t i = 0; i < events.size(); ++i)
        if (events[i].kind == k && events[i].unit == unit) return static_cast<int>(i);
      ADD_FAILURE() << stage_name(stage) << ": no " << trace_kind_name(k) << " event for " << unit;
      return -1;
    };
    for (const char* u : {"h.0", "h.1", "h.2", "<root>"}) {  // all finished when backward() returned
      EXPECT_LT(index(TraceKind::ReduceBegin, u), index(TraceKind::ReduceEnd, u)) << stage_name(stage) << " " << u;
    }
    for (auto [later, earlier] : {std::pair{"h.2", "h.1"}, {"h.1", "h.0"}}) {
      EXPECT_LT(index(TraceKind::ReduceBegin, later), index(TraceKind::BackwardBegin, earlier))
          << stage_name(stage) << ": " << later << "'s reduction should be issued before " << earlier << "'s backward";
      EXPECT_GT(index(TraceKind::ReduceEnd, later), index(TraceKind::BackwardBegin, earlier))
          << stage_name(stage) << ": " << later << "'s reduction should be in flight during " << earlier << "'s backward";
    }
    // Reduced gradients are in place: the shards hold them, stages 2-3 freed the full gradients.
    for (const ParamUnit* u : zero.units()) {
      std::vector<double> g = u->grad_shard().to_vector();
      EXPECT_TRUE(std::any_of(g.begin(), g.end(), [](double v) { return v != 0.0; }))
          << stage_name(stage) << " " << u->name();
      if (stage == ZeroStage::Two || stage == ZeroStage::Three) EXPECT_TRUE(u->full_grads_released()) << u->name();
    }
  }
}

}  // namespace zdl::dist::testing

namespace zdl::dist::testing {

TEST(ZeroLocal, NonFiniteGradientsAreNamedAndTheStepSkipped) {
  for (ZeroStage s : kAllStages) expect_nonfinite_step_detected_and_skipped(local(), s, 0.0);
}

TEST(ZeroLocal, AnInterruptIsReportedByTheStepAndChangesNothingElse) {
  for (ZeroStage s : kAllStages) expect_interrupt_on_one_rank_is_seen_by_every_rank(local(), s);
}

}  // namespace zdl::dist::testing

namespace zdl::dist::testing {

// [Note: unit lifecycle]: an optimizer step (or a norm) on gradients still accumulating, because
// the last micro-batch ran without set_grad_sync(true), is an error naming the unit, not a
// silent step on partial sums.
// An optimizer built before wrap() had no state and failed only at its step, pointing at an
// internal call ("the optimizer refreshed 0 of 3 units; call refresh_params(i)"); a bad lr or
// grad_scale made every parameter NaN.
TEST(ZeroLocal, AnOptimizerBeforeWrapOrWithNaNHyperparametersIsAClearError) {
  std::shared_ptr<Communicator> shared(&local(), [](Communicator*) {});
  ZeroPartitioner zero(shared, {.stage = ZeroStage::Three});
  std::shared_ptr<nn::GPT> model;
  {
    auto scope = zero.placement_scope(1);
    model = std::make_shared<nn::GPT>(tiny_gpt());
  }
  using ::zdl::testing::error_of;
  EXPECT_NE(error_of([&] { ZeroAdamW early(zero, adam_opts(), 0.1); }).find("build the optimizer (ZeroAdamW) after zero.wrap(model)"),
            std::string::npos);
  zero.wrap(*model);
  EXPECT_NE(error_of([&] { ZeroAdamW nan_decay(zero, adam_opts(), std::nan("")); }).find("weight decay nan"),
            std::string::npos);
  ZeroAdamW opt(zero, adam_opts(), 0.1);
  EXPECT_NE(error_of([&] { opt.set_lr(std::nan("")); }).find("lr must be a finite number >= 0"), std::string::npos);
  EXPECT_NE(error_of([&] { opt.step(std::nan("")); }).find("grad_scale must be a finite number >= 0"), std::string::npos);
  // A batch function that returns other rows than asked: refused (3 extra rows trained silently).
  Trainer trainer(zero, opt, {.micro_batch = 2});
  RunConfig c;
  const auto batch = global_batch(c, model->config.vocab_size, 0, 0);
  const Tensor x = batch.first, y = batch.second;
  const std::string m = error_of([&] {
    trainer.step(0, [&](int64_t, int64_t, int64_t) { return Trainer::Batch{x, y}; },
                 [&](const Tensor& in, const Tensor& target) { return model->loss(in, target); });
  });
  EXPECT_NE(m.find("Trainer: the batch function was asked for rows [0, 2) of step 0 and returned inputs of shape ["),
            std::string::npos)
      << m;
}

TEST(ZeroLocal, StepOnGradientsStillAccumulatingIsAClearError) {
  for (ZeroStage stage : kAllStages) {
    std::shared_ptr<Communicator> shared(&local(), [](Communicator*) {});
    ZeroPartitioner zero(shared, {.stage = stage});
    std::shared_ptr<nn::GPT> model;
    {
      auto scope = zero.placement_scope(1);
      model = std::make_shared<nn::GPT>(tiny_gpt());
    }
    zero.wrap(*model);
    ZeroAdamW opt(zero, adam_opts(), 0.1);
    RunConfig c;
    auto [x, y] = global_batch(c, model->config.vocab_size, 0, 0);
    zero.set_grad_sync(false);
    model->loss(x, y).backward();
    for (auto call : {std::function<void()>([&] { zero.clip_grad_norm(1.0); }), std::function<void()>([&] { opt.step(); })}) {
      try {
        call();
        ADD_FAILURE() << stage_name(stage) << ": no error";
      } catch (const Error& e) {
        std::string m = e.what();
        EXPECT_NE(m.find("accumulating"), std::string::npos) << m;
        EXPECT_NE(m.find("set_grad_sync(true)"), std::string::npos) << m;
        EXPECT_NE(m.find("unit h.0"), std::string::npos) << m;
      }
    }
    zero.zero_grad();  // and the manager is usable again
    model->loss(x, y).backward();
    opt.step(zero.clip_grad_norm(1.0));
  }
}

}  // namespace zdl::dist::testing

namespace zdl::dist::testing {

// The shared closed forms (dist/zero/closed_forms.h) are the paper's, written out here by hand for
// P = 1000 elements on N = 4 ranks: 16P per rank for DDP, 4P + 4P + 8P/N for ZeRO-1, ...
TEST(ZeroLocal, ClosedFormsAreThePapers) {
  using M = MemoryCategory;
  const ElementBytes f32 = ElementBytes::of(DType::F32), bf16 = ElementBytes::of(DType::BF16);
  using Bytes = std::map<M, int64_t>;
  EXPECT_EQ(state_bytes_closed_form(ZeroStage::DDP, 1000, 4, f32),
            (Bytes{{M::Parameter, 4000}, {M::Gradient, 4000}, {M::OptimizerState, 8000}}));
  EXPECT_EQ(state_bytes_closed_form(ZeroStage::One, 1000, 4, f32),
            (Bytes{{M::Parameter, 4000}, {M::Gradient, 4000}, {M::OptimizerState, 2000}}));
  EXPECT_EQ(state_bytes_closed_form(ZeroStage::Two, 1000, 4, f32),
            (Bytes{{M::Parameter, 4000}, {M::GradientShard, 1000}, {M::OptimizerState, 2000}}));
  EXPECT_EQ(state_bytes_closed_form(ZeroStage::Three, 1000, 4, f32),
            (Bytes{{M::ParameterShard, 1000}, {M::GradientShard, 1000}, {M::OptimizerState, 2000}}));
  EXPECT_EQ(state_bytes_closed_form(ZeroStage::Three, 1000, 4, bf16),  // K = 12: f32 master + m + v
            (Bytes{{M::ParameterShard, 500}, {M::GradientShard, 500}, {M::OptimizerState, 3000}}));
  auto wire = [&](ZeroStage st) {
    int64_t model = 0;
    for (const ExpectedTraffic& t : traffic_closed_form(st, 1000, 3, 4, f32))
      if (t.phase != CommPhase::Other) model += t.wire;
    return model;
  };
  EXPECT_EQ(wire(ZeroStage::DDP), 6000);    // 2 x 4000 x 3/4: one all-reduce
  EXPECT_EQ(wire(ZeroStage::One), 6000);    // reduce-scatter + all-gather: 2 Psi
  EXPECT_EQ(wire(ZeroStage::Two), 6000);
  EXPECT_EQ(wire(ZeroStage::Three), 9000);  // two all-gathers + reduce-scatter: 3 Psi
}

}  // namespace zdl::dist::testing

namespace zdl::dist::testing {

using ::zdl::testing::error_of;

// The mistakes a model author makes first get errors that say the fix.
TEST(ZeroLocal, CommonMistakesGetErrorsThatNameTheFix) {
  std::shared_ptr<Communicator> shared(&local(), [](Communicator*) {});
  RunConfig c;
  {  // built in the placement scope, never wrapped
    ZeroPartitioner zero(shared, {.stage = ZeroStage::Three});
    std::shared_ptr<nn::GPT> model;
    {
      auto scope = zero.placement_scope(1);
      model = std::make_shared<nn::GPT>(tiny_gpt());
    }
    const auto batch = global_batch(c, model->config.vocab_size, 0, 0);
    std::string e = error_of([&] { model->loss(batch.first, batch.second); });
    EXPECT_NE(e.find("wrap()"), std::string::npos) << e;
  }
  {  // optim::AdamW on a ZeRO-3 model; a write in a read-only GatheredParameters
    ZeroPartitioner zero(shared, {.stage = ZeroStage::Three});
    std::shared_ptr<nn::GPT> model;
    {
      auto scope = zero.placement_scope(1);
      model = std::make_shared<nn::GPT>(tiny_gpt());
    }
    zero.wrap(*model);
    auto [x, y] = global_batch(c, model->config.vocab_size, 0, 0);
    model->loss(x, y).backward();
    std::string e = error_of([&] {
      optim::AdamW plain(optim::decay_groups(*model, 0.1), adam_opts());
      plain.step();
    });
    EXPECT_NE(e.find("dist::ZeroAdamW"), std::string::npos) << e;
    zero.zero_grad();
    e = error_of([&] {
      GatheredParameters g(zero);
      model->h[0]->mlp->c_fc->weight.fill_(0.5);
      g.release();
    });
    EXPECT_NE(e.find("modify=*/true"), std::string::npos) << e;
    // A scope that ends without release(): said on stderr, thrown by the next training call.
    ::testing::internal::CaptureStderr();
    EXPECT_NO_THROW({
      GatheredParameters g(zero);
      model->h[0]->mlp->c_fc->weight.fill_(0.25);
    });
    const std::string said = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(said.find("modify=*/true"), std::string::npos) << said;
    const Tensor inputs = x, targets = y;  // (a lambda cannot capture structured bindings here)
    e = error_of([&] { model->loss(inputs, targets); });
    EXPECT_NE(e.find("read-only dist::GatheredParameters"), std::string::npos) << e;
    EXPECT_NO_THROW(model->loss(inputs, targets)) << "the error is raised once";
    EXPECT_NO_THROW({
      GatheredParameters g(zero, /*modify=*/true);
      model->h[0]->mlp->c_fc->weight.fill_(0.5);
    });
    GatheredParameters g(zero);
    EXPECT_EQ(model->h[0]->mlp->c_fc->weight.to_vector()[0], 0.5) << "the write with modify = true was kept";
  }
  {  // a module outside every unit using a unit's parameter (it would read it released): refused
    struct TiedAcrossUnits : nn::Module {
      TiedAcrossUnits() : nn::Module("TiedAcrossUnits") {
        auto block = register_module("block", std::make_shared<MlpBlock>(4));
        auto head = register_module("head", std::make_shared<nn::Module>("Head"));
        head->register_parameter("weight", block->fc1->weight);
      }
      Tensor forward(const Tensor& x) override { return x; }
    };
    ZeroPartitioner zero(shared, {.stage = ZeroStage::Three, .is_unit = [](const nn::Module& m) {
                                    return m.type_name() == "MlpBlock";
                                  }});
    std::shared_ptr<TiedAcrossUnits> model;
    {
      auto scope = zero.placement_scope(1);
      model = std::make_shared<TiedAcrossUnits>();
    }
    const std::string e = error_of([&] { zero.wrap(*model); });
    EXPECT_NE(e.find("parameter 'block.fc1.weight' of unit block is also used by module 'head'"), std::string::npos) << e;
  }
  {  // no module matched is_unit: a warning with the fix
    ::testing::internal::CaptureStderr();
    ZeroPartitioner zero(shared, {.stage = ZeroStage::Three, .is_unit = [](const nn::Module& m) {
                                    return m.type_name() == "NoSuchBlock";
                                  }});
    std::shared_ptr<nn::GPT> model;
    {
      auto scope = zero.placement_scope(1);
      model = std::make_shared<nn::GPT>(tiny_gpt());
    }
    zero.wrap(*model);
    std::string warned = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(warned.find("is_unit"), std::string::npos) << warned;
    EXPECT_EQ(zero.units().size(), 1u);
  }
}

// The partitioner unregisters its hooks when it dies: a model that outlives it (a DDP model's
// parameters keep their bytes) trains on without calling into the freed manager.
TEST(ZeroLocal, AModelOutlivingItsPartitionerRunsWithoutItsHooks) {
  std::shared_ptr<Communicator> shared(&local(), [](Communicator*) {});
  std::shared_ptr<nn::GPT> model;
  {
    ZeroPartitioner zero(shared, {.stage = ZeroStage::DDP});
    {
      auto scope = zero.placement_scope(1);
      model = std::make_shared<nn::GPT>(tiny_gpt());
    }
    zero.wrap(*model);
  }
  auto [x, y] = global_batch(RunConfig{}, model->config.vocab_size, 0, 0);
  Tensor loss = model->loss(x, y);
  EXPECT_NO_THROW(loss.backward());
  EXPECT_TRUE(std::isfinite(loss.item()));
}

}  // namespace zdl::dist::testing

// The closed forms the walkthrough prints and the tests check the ledgers against
// (dist/zero/closed_forms.h), on small numbers worked out by hand.
#include "dist/zero/closed_forms.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>

namespace zdl::dist {
namespace {

const ElementBytes f32 = ElementBytes::of(DType::F32), bf16 = ElementBytes::of(DType::BF16);

TEST(ClosedForms, ModelStateBytesPerStage) {
  // P = 1000 on N = 4: parameters and gradients 4 bytes an element, Adam's moments 8.
  EXPECT_EQ(model_state_bytes(ZeroStage::DDP, ModelState::OptimizerStates, int64_t{1000}, 4, f32), 8000);
  EXPECT_EQ(model_state_bytes(ZeroStage::One, ModelState::OptimizerStates, int64_t{1000}, 4, f32), 2000);
  EXPECT_EQ(model_state_bytes(ZeroStage::One, ModelState::Gradients, int64_t{1000}, 4, f32), 4000);
  EXPECT_EQ(model_state_bytes(ZeroStage::Two, ModelState::Gradients, int64_t{1000}, 4, f32), 1000);
  EXPECT_EQ(model_state_bytes(ZeroStage::Two, ModelState::Parameters, int64_t{1000}, 4, f32), 4000);
  EXPECT_EQ(model_state_bytes(ZeroStage::Three, ModelState::Parameters, int64_t{1000}, 4, f32), 1000);
  EXPECT_EQ(model_states_bytes(ZeroStage::Three, int64_t{1000}, 4, bf16), (2 + 2 + 12) * 1000 / 4);
  // The paper's Psi need not divide by N: its bytes are fractional.
  EXPECT_DOUBLE_EQ(model_state_bytes(ZeroStage::Three, ModelState::Parameters, 1001.0, 4, f32), 1001.0);
  EXPECT_DOUBLE_EQ(model_states_bytes(ZeroStage::Two, 1001.0, 3, f32), 4 * 1001.0 + 12 * 1001.0 / 3);
}

// docs/offload.md's table, P = 1000 on N = 4: the optimizer's k P / N (DDP: k P) and ZeRO-3's
// parameter shards s P / N; nothing for parameter offload below ZeRO-3, nothing without nvme.
TEST(ClosedForms, OffloadedBytes) {
  const OffloadOptions opt{.optimizer = OffloadTarget::Nvme}, both{.optimizer = OffloadTarget::Nvme,
                                                                    .params = OffloadTarget::Nvme};
  using M = std::map<MemoryCategory, int64_t>;
  EXPECT_EQ(offloaded_bytes_closed_form(ZeroStage::DDP, opt, 1000, 4, f32), (M{{MemoryCategory::OptimizerState, 8000}}));
  EXPECT_EQ(offloaded_bytes_closed_form(ZeroStage::One, opt, 1000, 4, f32), (M{{MemoryCategory::OptimizerState, 2000}}));
  EXPECT_EQ(offloaded_bytes_closed_form(ZeroStage::Two, both, 1000, 4, bf16), (M{{MemoryCategory::OptimizerState, 3000}}));
  EXPECT_EQ(offloaded_bytes_closed_form(ZeroStage::Three, both, 1000, 4, f32),
            (M{{MemoryCategory::OptimizerState, 2000}, {MemoryCategory::ParameterShard, 1000}}));
  EXPECT_EQ(offloaded_bytes_closed_form(ZeroStage::Three, both, 1000, 4, bf16),
            (M{{MemoryCategory::OptimizerState, 3000}, {MemoryCategory::ParameterShard, 500}}));
  EXPECT_EQ(offloaded_bytes_closed_form(ZeroStage::Three, {.optimizer = OffloadTarget::Cpu}, 1000, 4, f32), M{});
}

// The host tier (optimizer offload to cpu on a GPU), P = 1000 on N = 4: 12 bytes per element the
// rank updates (f32 too: its master becomes a host buffer) and the exchange's s; nothing on CPU
// ranks, where cpu is the plain run.
TEST(ClosedForms, HostTierBytes) {
  using M = std::map<MemoryCategory, int64_t>;
  using MC = MemoryCategory;
  const OffloadOptions cpu{.optimizer = OffloadTarget::Cpu};
  EXPECT_EQ(host_tier_bytes_closed_form(ZeroStage::DDP, cpu, Device::cuda(), 1000, 4, f32),
            (M{{MC::OptimizerState, 12000}, {MC::GradientShard, 4000}}));
  EXPECT_EQ(host_tier_bytes_closed_form(ZeroStage::Three, cpu, Device::cuda(), 1000, 4, bf16),
            (M{{MC::OptimizerState, 3000}, {MC::GradientShard, 500}}));
  EXPECT_EQ(host_tier_bytes_closed_form(ZeroStage::Three, cpu, Device::cpu(), 1000, 4, f32), M{});
  EXPECT_EQ(host_tier_bytes_closed_form(ZeroStage::Three, {.optimizer = OffloadTarget::Nvme}, Device::cuda(), 1000, 4, f32),
            M{});
}

TEST(ClosedForms, GptUnitsByHand) {
  // C = 10, V = 23, T = 8: a block 12 C^2 + 9C biases + 2 LayerNorms (2C each) = 1330; the root
  // wte 230 + wpe 80 + ln_f 20 = 330. Padded to multiples of 4: 1332 and 332.
  nn::GPTConfig cfg{.vocab_size = 23, .block_size = 8, .n_layer = 3, .n_head = 2, .n_embd = 10};
  PaddedUnits u = gpt_padded_units(cfg, 1);
  EXPECT_EQ(u.root, 330);
  EXPECT_EQ(u.blocks, (std::vector<int64_t>{1330, 1330, 1330}));
  u = gpt_padded_units(cfg, 4);
  EXPECT_EQ(u.root, 332);
  EXPECT_EQ(u.blocks, (std::vector<int64_t>{1332, 1332, 1332}));
  // Without biases: LayerNorms keep their weights (C each); a padded vocabulary counts in wte.
  cfg.bias = false;
  cfg.padded_vocab_size = 32;
  u = gpt_padded_units(cfg, 1);
  EXPECT_EQ(u.root, 320 + 80 + 10);
  EXPECT_EQ(u.blocks[0], 1200 + 20);
  // GPT-2 small (124M): 124,439,808 parameters with wte's 50,257 rows.
  const nn::GPTConfig gpt2{.vocab_size = 50257, .block_size = 1024, .n_layer = 12, .n_head = 12, .n_embd = 768};
  EXPECT_EQ(gpt_padded_units(gpt2, 1).total(), 124439808);
}

TEST(ClosedForms, PerCategoryMapIsTheSameFormula) {
  for (ZeroStage st : {ZeroStage::DDP, ZeroStage::One, ZeroStage::Two, ZeroStage::Three}) {
    int64_t sum = 0;
    for (const auto& [cat, bytes] : state_bytes_closed_form(st, 1200, 4, bf16)) sum += bytes;
    EXPECT_EQ(sum, model_states_bytes(st, int64_t{1200}, 4, bf16)) << stage_name(st);
  }
}

TEST(ClosedForms, FormulasAsPrinted) {
  EXPECT_EQ(model_state_formula(ZeroStage::DDP, ModelState::Parameters, f32), "4Psi");
  EXPECT_EQ(model_state_formula(ZeroStage::One, ModelState::OptimizerStates, bf16), "12Psi/N");
  EXPECT_EQ(model_states_formula(ZeroStage::DDP, f32), "(4+4+8)Psi");
  EXPECT_EQ(model_states_formula(ZeroStage::One, f32), "4Psi+4Psi+8Psi/N");
  EXPECT_EQ(model_states_formula(ZeroStage::Two, bf16), "2Psi+(2+12)Psi/N");
  EXPECT_EQ(model_states_formula(ZeroStage::Three, f32), "(4+4+8)Psi/N");
}

TEST(ClosedForms, MemoryReductionIsThePapers) {
  EXPECT_DOUBLE_EQ(memory_reduction(ZeroStage::DDP, 4, f32), 1.0);
  EXPECT_DOUBLE_EQ(memory_reduction(ZeroStage::One, 4, f32), 16.0 / 10.0);
  EXPECT_DOUBLE_EQ(memory_reduction(ZeroStage::Two, 4, f32), 16.0 / 7.0);
  EXPECT_DOUBLE_EQ(memory_reduction(ZeroStage::Three, 4, f32), 4.0);
  EXPECT_NEAR(memory_reduction(ZeroStage::One, 64, bf16), 16.0 / (4 + 12.0 / 64), 1e-12);  // near 4x at large N
}

TEST(ClosedForms, StepPeaksFollowTheSchedule) {
  // N = 4: the root 40 elements, four blocks; f32.
  const PaddedUnits units{.root = 40, .blocks = {20, 24, 20, 16}};
  EXPECT_EQ(units.total(), 120);
  EXPECT_EQ(units.largest(), 40);
  const StepPeaks ddp = step_peaks_closed_form(ZeroStage::DDP, units, 4, 1, f32);
  EXPECT_EQ(ddp.parameters, 480);
  EXPECT_EQ(ddp.gradients, 480);
  EXPECT_EQ(ddp.optimizer_states, 960);
  EXPECT_EQ(ddp.comm, 0);  // no reduce-scatter
  const StepPeaks two = step_peaks_closed_form(ZeroStage::Two, units, 4, 1, f32);
  EXPECT_EQ(two.parameters, 480);
  EXPECT_EQ(two.gradients, 4 * (30 + 40 + 44));  // shard + root + the two largest adjacent blocks
  EXPECT_EQ(two.optimizer_states, 240);
  EXPECT_EQ(two.comm, 4 * 40 / 4);  // one unit's shard, the largest
  const StepPeaks three = step_peaks_closed_form(ZeroStage::Three, units, 4, 2, f32);
  EXPECT_EQ(three.parameters, 4 * (30 + 40 + 64));  // prefetch 2: three adjacent blocks gathered
  EXPECT_EQ(three.gradients, 4 * (30 + 40 + 44));
}

TEST(ClosedForms, TrafficAddsUpToThePapersVolumes) {
  const int64_t P = 1200, N = 4;
  for (ZeroStage st : {ZeroStage::DDP, ZeroStage::One, ZeroStage::Two, ZeroStage::Three}) {
    int64_t wire = 0;
    for (const ExpectedTraffic& t : traffic_closed_form(st, P, 5, N, f32))
      if (t.phase != CommPhase::Other) wire += t.wire;
    EXPECT_EQ(wire, model_volumes_per_step(st) * model_volume_wire_bytes(P, N, f32)) << stage_name(st);
  }
  EXPECT_EQ(model_volume_wire_bytes(P, N, f32), 4 * 1200 * 3 / 4);
  EXPECT_EQ(model_volumes_per_step(ZeroStage::Two), 2);
  EXPECT_EQ(model_volumes_per_step(ZeroStage::Three), 3);
}

TEST(ClosedForms, CheckpointingSavesAllButTheBlocksInputs) {
  // 2 rows of 8 tokens, C = 16, NH = 2, f32, 3 blocks: L (16 C + NH + 4) (B/N) T s.
  EXPECT_EQ(checkpointing_saved_bytes(3, 2, 8, 16, 2, 4), 3 * (16 * 16 + 2 + 4) * 2 * 8 * 4);
  const BlockActivations b = block_activation_bytes(2, 8, 16, 2, 4);
  EXPECT_EQ(checkpointing_saved_bytes(1, 2, 8, 16, 2, 4), b.kept - b.checkpointed);
  // One token or one head: the attention output's [T, C] layout is a view, C less a token.
  EXPECT_EQ(checkpointing_saved_bytes(3, 2, 1, 16, 2, 4), 3 * (15 * 16 + 2 + 4) * 2 * 1 * 4);
  EXPECT_EQ(checkpointing_saved_bytes(3, 2, 8, 16, 1, 4), 3 * (15 * 16 + 1 + 4) * 2 * 8 * 4);
}

}  // namespace
}  // namespace zdl::dist

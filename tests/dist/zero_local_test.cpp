// ZeRO on one rank (LocalCommunicator): every stage is bit-exact with plain training, and the
// memory / traffic ledgers follow the closed forms at N = 1. The same cases run at N = 2, 4
// in tests/dist/mpi/zero_mpi_test.cpp.
#include "zero_cases.h"

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

TEST(ZeroLocal, GradientAccumulationMatches) {
  for (ZeroStage s : kAllStages) expect_equivalent(local(), {.stage = s, .grad_accum = 2}, 1e-6);
}

TEST(ZeroLocal, MemoryFollowsClosedForms) {
  for (ZeroStage s : kAllStages) expect_memory_closed_form(local(), s);
}

TEST(ZeroLocal, TrafficFollowsClosedForms) {
  for (ZeroStage s : kAllStages) expect_traffic_closed_form(local(), s);
}

TEST(ZeroLocal, Zero3ShardsMatchFullInit) { expect_zero3_shards_match_full_init(local()); }

}  // namespace zdl::dist::testing

namespace zdl::dist::testing {

TEST(ZeroLocal, Bf16TracksF32) {
  for (ZeroStage s : kAllStages) expect_bf16_tracks_f32(local(), s);
}

}  // namespace zdl::dist::testing

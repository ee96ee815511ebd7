// Sharded checkpoints at N ranks (mpirun, N = 2 and 4): resume under every stage, rejection
// of bad checkpoints found by one rank only, interrupted saves, consolidation to GPT-2; and
// the cross-world-size pair ctest wires with ZDL_SHARDED_XWS_DIR: dist_sharded_save_np4 saves,
// dist_sharded_load_np2 (here) and dist_sharded_load_np1 (test_dist) load.
#include "../sharded_checkpoint_cases.h"
#include "../user_model.h"
#include "mpi_test_env.h"

namespace zdl::dist::testing {

TEST(ShardedCheckpointMpi, ResumeUnderEveryStageContinuesTheTrajectory) {
  expect_resume_continues_trajectory(world(), DType::F32, 0.0);
}

// Under DDP every rank holds the full masters but still writes only its block.
TEST(ShardedCheckpointMpi, CheckpointsSavedUnderDdpAndZero1LoadUnderEveryStage) {
  expect_resume_continues_trajectory(world(), DType::F32, 0.0, ZeroStage::DDP);
  expect_resume_continues_trajectory(world(), DType::F32, 0.0, ZeroStage::One);
}

// Mixed precision: bf16 compute copies are recast from the saved f32 masters, bit for bit.
TEST(ShardedCheckpointMpi, ResumeInBf16ContinuesTheTrajectoryExactly) {
  expect_resume_continues_trajectory(world(), DType::BF16, 0.0);
}

TEST(ShardedCheckpointMpi, ResumeInF64IsExactUpToRounding) {
  expect_resume_continues_trajectory(world(), DType::F64, 1e-12);
}

TEST(ShardedCheckpointMpi, UserModelWithDropoutResumesExactly) {
  sharded::SharedDir tmp(world());
  expect_user_model_resumes_exactly(world(), tmp / "ckpt");
}

TEST(ShardedCheckpointMpi, BadCheckpointsAreRejectedOnEveryRank) { expect_bad_checkpoints_rejected(world()); }

TEST(ShardedCheckpointMpi, InterruptedSaveLeavesThePreviousCheckpoint) {
  expect_interrupted_save_leaves_previous_checkpoint(world());
}

TEST(ShardedCheckpointMpi, ASaveKeepsFilesItDoesNotOwn) { expect_save_keeps_files_it_does_not_own(world()); }

TEST(ShardedCheckpointMpi, ConsolidationMatchesTheZeroModel) { expect_consolidation_matches_zero_model(world()); }

TEST(ShardedCheckpointMpi, SaveForOtherWorldSizes) {
  const std::string dir = cross_world_size_dir();
  if (dir.empty()) {
    GTEST_SKIP() << "run by ctest as dist_sharded_save_np4 (needs ZDL_SHARDED_XWS_DIR)";
  }
  save_for_other_world_sizes(world(), dir);
}

TEST(ShardedCheckpointMpi, LoadsCheckpointOfAnotherWorldSize) {
  const std::string dir = cross_world_size_dir();
  if (dir.empty()) {
    GTEST_SKIP() << "run by ctest as dist_sharded_load_np2 (needs ZDL_SHARDED_XWS_DIR)";
  }
  expect_resume_from_other_world_size(world(), dir, 0.0);
}

}  // namespace zdl::dist::testing

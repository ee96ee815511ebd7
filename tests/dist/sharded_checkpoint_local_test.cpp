// Sharded checkpoints on one rank (LocalCommunicator): resume under every stage, rejection of
// bad checkpoints, interrupted saves, consolidation to GPT-2; and loading a checkpoint saved
// by 4 ranks (ctest runs dist_sharded_save_np4 first and points ZDL_SHARDED_XWS_DIR at it).
// The same cases run at N = 2, 4 in tests/dist/mpi/sharded_checkpoint_mpi_test.cpp.
#include "sharded_checkpoint_cases.h"
#include "user_model.h"

namespace zdl::dist::testing {

namespace {
Communicator& local() {
  static std::shared_ptr<Communicator> c = dist::init();
  return *c;
}
}  // namespace

// At N = 1 every stage is bit-exact with plain training, so a resumed run is bit-exact too.
TEST(ShardedCheckpointLocal, ResumeUnderEveryStageContinuesTheTrajectoryExactly) {
  expect_resume_continues_trajectory(local(), DType::F32, 0.0);
}

TEST(ShardedCheckpointLocal, CheckpointSavedUnderDdpLoadsUnderEveryStage) {
  expect_resume_continues_trajectory(local(), DType::F32, 0.0, ZeroStage::DDP);
}

TEST(ShardedCheckpointLocal, UserModelWithDropoutResumesExactly) {
  sharded::SharedDir tmp(local());
  expect_user_model_resumes_exactly(local(), tmp / "ckpt");
}

TEST(ShardedCheckpointLocal, BadCheckpointsAreRejectedClearly) { expect_bad_checkpoints_rejected(local()); }

TEST(ShardedCheckpointLocal, InterruptedSaveLeavesThePreviousCheckpoint) {
  expect_interrupted_save_leaves_previous_checkpoint(local());
}

TEST(ShardedCheckpointLocal, ASaveKeepsFilesItDoesNotOwn) { expect_save_keeps_files_it_does_not_own(local()); }

TEST(ShardedCheckpointLocal, ASaveRefusesWhatItWouldDestroy) { expect_save_refuses_what_it_would_destroy(local()); }

TEST(ShardedCheckpointLocal, ConsolidationMatchesTheZeroModel) { expect_consolidation_matches_zero_model(local()); }

TEST(ShardedCheckpointLocal, LoadsCheckpointOfAnotherWorldSize) {
  const std::string dir = cross_world_size_dir();
  if (dir.empty()) {
    GTEST_SKIP() << "run by ctest as dist_sharded_load_np1 (needs ZDL_SHARDED_XWS_DIR)";
  }
  expect_resume_from_other_world_size(local(), dir, 0.0);
}

}  // namespace zdl::dist::testing

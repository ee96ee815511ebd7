// CommLedger: the ring wire-byte rule, accumulation by kind and phase, the thread's phase.
#include "dist/comm/comm_ledger.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "core/check.h"

namespace zdl::dist {

TEST(CommLedger, NamesKindsAndPhases) {
  EXPECT_EQ(std::string(collective_name(CollectiveKind::AllReduce)), "all_reduce");
  EXPECT_EQ(std::string(collective_name(CollectiveKind::ReduceScatter)), "reduce_scatter");
  EXPECT_EQ(std::string(collective_name(CollectiveKind::AllGather)), "all_gather");
  EXPECT_EQ(std::string(collective_name(CollectiveKind::Broadcast)), "broadcast");
  EXPECT_EQ(std::string(phase_name(CommPhase::ForwardGather)), "forward_gather");
  EXPECT_EQ(std::string(phase_name(CommPhase::BackwardGather)), "backward_gather");
  EXPECT_EQ(std::string(phase_name(CommPhase::GradReduce)), "grad_reduce");
  EXPECT_EQ(std::string(phase_name(CommPhase::PostStepGather)), "post_step_gather");
  EXPECT_EQ(std::string(phase_name(CommPhase::Other)), "other");
}

TEST(CommLedger, RingWireBytesFollowTheClosedForms) {
  // payload 4000 bytes: all-gather / reduce-scatter (N-1)/N, all-reduce 2(N-1)/N.
  EXPECT_EQ(ring_wire_bytes(CollectiveKind::AllGather, 4000, 1), 0);
  EXPECT_EQ(ring_wire_bytes(CollectiveKind::AllGather, 4000, 2), 2000);
  EXPECT_EQ(ring_wire_bytes(CollectiveKind::ReduceScatter, 4000, 4), 3000);
  EXPECT_EQ(ring_wire_bytes(CollectiveKind::AllReduce, 4000, 1), 0);
  EXPECT_EQ(ring_wire_bytes(CollectiveKind::AllReduce, 4000, 2), 4000);
  EXPECT_EQ(ring_wire_bytes(CollectiveKind::AllReduce, 4000, 4), 6000);
  EXPECT_EQ(ring_wire_bytes(CollectiveKind::AllReduce, 8, 3), 10);  // 2*8*2/3 = 10.67, floored
  EXPECT_EQ(ring_wire_bytes(CollectiveKind::Broadcast, 4000, 4, /*is_root=*/true), 4000);
  EXPECT_EQ(ring_wire_bytes(CollectiveKind::Broadcast, 4000, 4, /*is_root=*/false), 0);
  EXPECT_EQ(ring_wire_bytes(CollectiveKind::Broadcast, 4000, 1, /*is_root=*/true), 0);
  EXPECT_THROW(ring_wire_bytes(CollectiveKind::AllGather, 4000, 0), Error);
}

TEST(CommLedger, AccumulatesByKindAndPhase) {
  CommLedger ledger;
  ledger.record(CollectiveKind::AllGather, CommPhase::ForwardGather, 100, 75);
  ledger.record(CollectiveKind::AllGather, CommPhase::ForwardGather, 100, 75);
  ledger.record(CollectiveKind::AllGather, CommPhase::BackwardGather, 40, 30);
  ledger.record(CollectiveKind::ReduceScatter, CommPhase::GradReduce, 200, 150);
  CommStats fg = ledger.stats(CollectiveKind::AllGather, CommPhase::ForwardGather);
  EXPECT_EQ(fg.calls, 2);
  EXPECT_EQ(fg.payload_bytes, 200);
  EXPECT_EQ(fg.wire_bytes, 150);
  EXPECT_EQ(ledger.stats(CollectiveKind::AllReduce, CommPhase::GradReduce).calls, 0);
  CommStats ag = ledger.total(CollectiveKind::AllGather);
  EXPECT_EQ(ag.calls, 3);
  EXPECT_EQ(ag.payload_bytes, 240);
  CommStats all = ledger.total();
  EXPECT_EQ(all.calls, 4);
  EXPECT_EQ(all.payload_bytes, 440);
  EXPECT_EQ(all.wire_bytes, 330);
  ledger.reset();
  EXPECT_EQ(ledger.total().calls, 0);
  EXPECT_EQ(ledger.total().payload_bytes, 0);
}

TEST(CommLedger, PhaseScopesNestAndArePerThread) {
  EXPECT_EQ(current_comm_phase(), CommPhase::Other);
  {
    CommPhaseScope a(CommPhase::GradReduce);
    EXPECT_EQ(current_comm_phase(), CommPhase::GradReduce);
    {
      CommPhaseScope b(CommPhase::ForwardGather);
      EXPECT_EQ(current_comm_phase(), CommPhase::ForwardGather);
      CommPhase other_thread = CommPhase::GradReduce;
      std::thread([&] { other_thread = current_comm_phase(); }).join();
      EXPECT_EQ(other_thread, CommPhase::Other);
    }
    EXPECT_EQ(current_comm_phase(), CommPhase::GradReduce);
  }
  EXPECT_EQ(current_comm_phase(), CommPhase::Other);
}

TEST(CommLedger, RecordCollectiveUsesTheThreadsPhase) {
  comm_ledger().reset();
  {
    CommPhaseScope p(CommPhase::PostStepGather);
    record_collective(CollectiveKind::AllGather, 800, 4);
  }
  CommStats s = comm_ledger().stats(CollectiveKind::AllGather, CommPhase::PostStepGather);
  EXPECT_EQ(s.calls, 1);
  EXPECT_EQ(s.payload_bytes, 800);
  EXPECT_EQ(s.wire_bytes, 600);
  comm_ledger().reset();
}

}  // namespace zdl::dist

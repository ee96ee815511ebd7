// AsyncWork: the watchdog and error paths of the MPI backend's completion handle, without MPI
// (a collective that never completes is the one no other rank joined).
#include "dist/comm/async_work.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace zdl::dist {

using namespace std::chrono_literals;

TEST(AsyncWork, WatchdogThrowsAfterTheTimeout) {
  AsyncWork work("[rank 0/4]", "all_gather", 4096, CommPhase::ForwardGather, 100ms);
  auto start = std::chrono::steady_clock::now();
  try {
    work.wait();
    FAIL() << "wait() returned on a collective that never completed";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind("[rank 0/4] watchdog: all_gather of 4096 bytes (phase forward_gather) did not complete "
                        "within 0.1 s; another rank may have died, diverged or be stuck",
                        0),
              0u)
        << msg;
  }
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_GE(elapsed, 100ms);
  EXPECT_LT(elapsed, 5s);
  EXPECT_FALSE(work.done());
  // A late completion (the missing rank joined after all) makes a later wait() succeed.
  work.complete();
  EXPECT_TRUE(work.done());
  EXPECT_NO_THROW(work.wait());
}

TEST(AsyncWork, CompletionFromAnotherThreadWakesTheWaiter) {
  auto work = std::make_shared<AsyncWork>("[rank 1/2]", "all_reduce", 8, CommPhase::Other, 10s);
  int finished = 0;
  work->set_finisher([&] { ++finished; });
  std::thread comm([work] {
    std::this_thread::sleep_for(20ms);
    work->complete();
  });
  work->wait();
  comm.join();
  EXPECT_TRUE(work->done());
  work->wait();  // the finisher (copy-back) runs once
  EXPECT_EQ(finished, 1);
}

TEST(AsyncWork, FailureIsRethrownWithThePrefix) {
  AsyncWork work("[rank 3/4]", "reduce_scatter", 64, CommPhase::GradReduce, 10s);
  bool finisher_ran = false;
  work.set_finisher([&] { finisher_ran = true; });
  work.fail("MPI error: Message truncated");
  EXPECT_TRUE(work.done());
  for (int i = 0; i < 2; ++i) {
    try {
      work.wait();
      FAIL() << "wait() succeeded on a failed collective";
    } catch (const Error& e) {
      EXPECT_STREQ(e.what(), "[rank 3/4] reduce_scatter failed: MPI error: Message truncated");
    }
  }
  EXPECT_FALSE(finisher_ran);
}

TEST(AsyncWork, WatchdogMessageNamesOpBytesPhaseAndTimeout) {
  std::string msg = watchdog_message("[rank 2/8]", "reduce_scatter", 123, CommPhase::GradReduce, 300000ms);
  EXPECT_NE(msg.find("[rank 2/8] watchdog: reduce_scatter of 123 bytes (phase grad_reduce) did not complete within "
                     "300 s"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("abort_job"), std::string::npos) << msg;
  EXPECT_NE(msg.find("raise ZDL_COLLECTIVE_TIMEOUT_S if it is just slow"), std::string::npos) << msg;
  msg = watchdog_message("[rank 2/8]", "all_gather", 8, CommPhase::Other, 1000ms, "--collective-timeout");
  EXPECT_NE(msg.find("raise --collective-timeout if it is just slow"), std::string::npos) << msg;
}

}  // namespace zdl::dist

// InterruptScope: inside it a SIGINT or SIGTERM is recorded instead of ending the process, and the
// previous handlers come back when it ends; a second one ends the process, unless it is the first
// delivered twice. (The programs' behaviour is tested end to end in
// tests/examples/train_gpt_faults_test.py.)
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <csignal>
#include <thread>

#include "io/interrupt.h"

namespace zdl::io {

namespace {

volatile std::sig_atomic_t g_previous_seen = 0;
void previous_handler(int sig) { g_previous_seen = sig; }

TEST(InterruptScope, TheFirstSignalIsRecordedNotFatalAndTheOldHandlerComesBack) {
  std::signal(SIGTERM, previous_handler);
  EXPECT_EQ(interrupt_signal(), 0);
  {
    InterruptScope scope;
    EXPECT_EQ(interrupt_signal(), 0);
    std::raise(SIGTERM);
    EXPECT_EQ(interrupt_signal(), SIGTERM);
    EXPECT_EQ(g_previous_seen, 0);
  }
  EXPECT_EQ(interrupt_signal(), 0) << "a new scope starts clean";
  std::raise(SIGTERM);
  EXPECT_EQ(g_previous_seen, SIGTERM) << "the handler from before the scope";
  std::signal(SIGTERM, SIG_DFL);
}

TEST(InterruptScope, SigintToo) {
  InterruptScope scope;
  std::raise(SIGINT);
  EXPECT_EQ(interrupt_signal(), SIGINT);
  EXPECT_EQ(exit_code_of_signal(SIGINT), 130);
  EXPECT_EQ(exit_code_of_signal(SIGTERM), 143);
  EXPECT_STREQ(signal_name(SIGINT), "SIGINT");
}

TEST(InterruptScope, ASecondSignalEndsTheProcessAtOnce) {
  // Another signal, or the same one more than a second after the first: a second request.
  EXPECT_EXIT(
      {
        InterruptScope scope;
        std::raise(SIGINT);
        std::raise(SIGTERM);
        std::_Exit(0);  // not reached
      },
      ::testing::KilledBySignal(SIGTERM), "");
  EXPECT_EXIT(
      {
        InterruptScope scope;
        std::raise(SIGINT);
        std::this_thread::sleep_for(std::chrono::milliseconds(1100));
        std::raise(SIGINT);
        std::_Exit(0);  // not reached
      },
      ::testing::KilledBySignal(SIGINT), "");
}

TEST(InterruptScope, TheSameSignalTwiceAtOnceIsOneRequest) {
  // What mpiexec forwarding a scheduler's SIGTERM that every rank got itself looks like.
  EXPECT_EXIT(
      {
        InterruptScope scope;
        std::raise(SIGTERM);
        std::raise(SIGTERM);
        std::_Exit(interrupt_signal() == SIGTERM ? 7 : 1);
      },
      ::testing::ExitedWithCode(7), "");
}

}  // namespace

}  // namespace zdl::io

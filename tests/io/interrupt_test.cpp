// InterruptScope: inside it a SIGINT or SIGTERM is recorded instead of ending the process, and the
// previous handlers come back when it ends. (The second signal's immediate exit and the programs'
// behaviour are tested end to end in tests/examples/train_gpt_faults_test.py.)
#include <gtest/gtest.h>
#include <signal.h>

#include <csignal>

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
  EXPECT_EXIT(
      {
        InterruptScope scope;
        std::raise(SIGINT);
        std::raise(SIGINT);
        std::_Exit(0);  // not reached
      },
      ::testing::KilledBySignal(SIGINT), "");
}

}  // namespace

}  // namespace zdl::io

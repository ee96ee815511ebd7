// Ctrl-C and a scheduler's SIGTERM as a request to stop, not a kill. While an InterruptScope
// lives, the first SIGINT or SIGTERM is only recorded (interrupt_signal() returns it) and, where
// the scope was asked to, acknowledged with one line on stderr; the program stops at its next
// safe point (dist::Trainer tells every rank at the end of the step; train_gpt then saves and
// exits 130 or 143). A second signal ends the process at once, as the signal would without the
// scope; the same signal again within a second of the first is that one delivered twice (mpiexec
// forwarding what a scheduler sent every rank, timeout(1) signalling the process and its group)
// and changes nothing. Under mpirun the launcher forwards a Ctrl-C to every rank; a signal that reaches only
// one rank stops every rank all the same, through the step's own all-reduce.
#pragma once

namespace zdl::io {

class InterruptScope {
 public:
  // `acknowledgement`: the line printed when the first signal arrives (nullptr: none, e.g. on
  // every rank but one). Kept by pointer: a string that outlives the scope.
  explicit InterruptScope(const char* acknowledgement = nullptr);
  ~InterruptScope();  // the previous handlers again; a recorded signal is forgotten
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;
};

// SIGINT or SIGTERM once one arrived inside an InterruptScope; 0 otherwise.
int interrupt_signal();
// The shell's exit code for a process ended by `sig`: 128 + sig (130 for SIGINT, 143 for SIGTERM).
int exit_code_of_signal(int sig);
// "SIGINT", "SIGTERM".
const char* signal_name(int sig);

}  // namespace zdl::io

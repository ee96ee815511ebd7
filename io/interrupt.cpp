#include "io/interrupt.h"

#include <signal.h>
#include <unistd.h>

#include <csignal>
#include <cstring>

#include "core/check.h"

namespace zdl::io {

namespace {

volatile std::sig_atomic_t g_signal = 0;
const char* g_acknowledgement = nullptr;  // set before the handlers go in, read only by them
size_t g_acknowledgement_len = 0;
struct sigaction g_previous_int {}, g_previous_term {};
bool g_installed = false;

// Async-signal-safe only: a flag, write(2), and the default action for a second signal.
void on_signal(int sig) {
  if (g_signal != 0) {
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    return;
  }
  g_signal = sig;
  if (g_acknowledgement_len > 0) {
    [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, g_acknowledgement, g_acknowledgement_len);
  }
}

}  // namespace

InterruptScope::InterruptScope(const char* acknowledgement) {
  ZDL_CHECK(!g_installed, "InterruptScope: one at a time");
  g_signal = 0;
  g_acknowledgement = acknowledgement;
  g_acknowledgement_len = acknowledgement ? std::strlen(acknowledgement) : 0;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // a read or write in progress goes on; the flag is polled
  ::sigaction(SIGINT, &sa, &g_previous_int);
  ::sigaction(SIGTERM, &sa, &g_previous_term);
  g_installed = true;
}

InterruptScope::~InterruptScope() {
  ::sigaction(SIGINT, &g_previous_int, nullptr);
  ::sigaction(SIGTERM, &g_previous_term, nullptr);
  g_installed = false;
  g_signal = 0;
}

int interrupt_signal() { return g_signal; }

int exit_code_of_signal(int sig) { return 128 + sig; }

const char* signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    default: return "a signal";
  }
}

}  // namespace zdl::io

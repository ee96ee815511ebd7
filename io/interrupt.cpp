#include "io/interrupt.h"

#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/check.h"

namespace zdl::io {

namespace {

// The first signal, and when it came (CLOCK_MONOTONIC, ns; 0 until stored). Atomics, lock-free,
// so a handler may use them: the same process-directed signal sent twice can run the handler on
// two threads at once (each thread blocks only the signal its own handler is running).
std::atomic<int> g_signal{0};
std::atomic<int64_t> g_first_ns{0};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<int64_t>::is_always_lock_free);
// The same signal again within this of the first is the first delivered twice, not a second
// request: mpiexec forwards a SIGTERM that a scheduler also sent each rank itself, and timeout(1)
// signals the process and its group. Only a later one (or another signal) stops at once.
constexpr int64_t kDuplicateNs = 1'000'000'000;

int64_t monotonic_ns() {  // clock_gettime is async-signal-safe
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}
const char* g_acknowledgement = nullptr;  // set before the handlers go in, read only by them
size_t g_acknowledgement_len = 0;
struct sigaction g_previous_int {}, g_previous_term {};
bool g_installed = false;

// A handler's frame pushed onto a thread's stack in the middle of one of oneDNN's generated GEMM
// kernels corrupted it: a broken heap or a segfault in about 1 of 500 runs interrupted mid-step,
// never with zerodl's own kernels (none in 3400), and gone with the handler off that stack (none
// in 4200), so those kernels evidently keep data below the stack pointer. The handler runs on a
// stack of its own on the thread that installs the scope; the OpenMP workers, which run those
// kernels too, block the two signals meanwhile.
std::vector<char> g_handler_stack;  // allocated by the first scope, not by every program at start
stack_t g_previous_stack{};

void block_in_openmp_workers(bool block) {
  sigset_t both;
  sigemptyset(&both);
  sigaddset(&both, SIGINT);
  sigaddset(&both, SIGTERM);
#pragma omp parallel
  if (omp_get_thread_num() != 0) ::pthread_sigmask(block ? SIG_BLOCK : SIG_UNBLOCK, &both, nullptr);
}

// Async-signal-safe only: atomics, the clock, write(2), and the default action for a second signal.
void on_signal(int sig) {
  const int64_t now = monotonic_ns();
  int first = 0;
  if (!g_signal.compare_exchange_strong(first, sig)) {
    const int64_t first_ns = g_first_ns.load();  // 0: the first one's handler is still running
    if (sig == first && (first_ns == 0 || now - first_ns < kDuplicateNs)) return;
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    return;
  }
  g_first_ns.store(now);
  if (g_acknowledgement_len > 0) {
    [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, g_acknowledgement, g_acknowledgement_len);
  }
}

}  // namespace

InterruptScope::InterruptScope(const char* acknowledgement) {
  ZDL_CHECK(!g_installed, "InterruptScope: one at a time");
  g_signal.store(0);
  g_first_ns.store(0);
  g_acknowledgement = acknowledgement;
  g_acknowledgement_len = acknowledgement ? std::strlen(acknowledgement) : 0;
  if (g_handler_stack.empty()) g_handler_stack.resize(256 * 1024);
  stack_t own{};
  own.ss_sp = g_handler_stack.data();
  own.ss_size = g_handler_stack.size();
  ZDL_CHECK(::sigaltstack(&own, &g_previous_stack) == 0, "InterruptScope: sigaltstack failed: ", std::strerror(errno));
  block_in_openmp_workers(true);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  // SA_RESTART: a read or write in progress goes on (the flag is polled); SA_ONSTACK: see above.
  sa.sa_flags = SA_RESTART | SA_ONSTACK;
  ::sigaction(SIGINT, &sa, &g_previous_int);
  ::sigaction(SIGTERM, &sa, &g_previous_term);
  g_installed = true;
}

InterruptScope::~InterruptScope() {
  ::sigaction(SIGINT, &g_previous_int, nullptr);
  ::sigaction(SIGTERM, &g_previous_term, nullptr);
  block_in_openmp_workers(false);
  ::sigaltstack(&g_previous_stack, nullptr);
  g_installed = false;
  g_signal.store(0);
  g_first_ns.store(0);
}

int interrupt_signal() { return g_signal.load(); }

int exit_code_of_signal(int sig) { return 128 + sig; }

const char* signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    default: return "a signal";
  }
}

}  // namespace zdl::io

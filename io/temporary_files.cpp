#include "io/temporary_files.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>

namespace zdl::io {

namespace {

// Lock-free, so the handler can read it whatever the thread it interrupts was doing. 256 writers
// at once is far more than any program here has open (prepare_tokens: the shards it stages).
constexpr int kSlots = 256;
std::atomic<const char*> g_paths[kSlots];

constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction g_previous[3];
char g_message[128];

void remove_listed_and_end(int sig) {
  for (auto& slot : g_paths)
    if (const char* path = slot.load()) ::unlink(path);
  const ssize_t ignored = ::write(STDERR_FILENO, g_message, std::strlen(g_message));
  (void)ignored;
  ::signal(sig, SIG_DFL);
  ::raise(sig);  // delivered when the handler returns: the process ends by the signal
}

}  // namespace

int list_temporary(const char* path) {
  for (int i = 0; i < kSlots; ++i) {
    const char* empty = nullptr;
    if (g_paths[i].compare_exchange_strong(empty, path)) return i;
  }
  return -1;
}

void relist_temporary(int slot, const char* path) {
  if (slot >= 0) g_paths[slot].store(path);
}

void forget_temporary(int slot) {
  if (slot >= 0) g_paths[slot].store(nullptr);
}

RemoveTemporariesOnSignal::RemoveTemporariesOnSignal(const char* program) {
  std::snprintf(g_message, sizeof g_message, "\n%s: stopped by a signal; its temporary files are removed\n", program);
  struct sigaction sa {};
  sa.sa_handler = remove_listed_and_end;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < 3; ++i) sigaddset(&sa.sa_mask, kSignals[i]);  // one handler at a time
  for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], &sa, &g_previous[i]);
}

RemoveTemporariesOnSignal::~RemoveTemporariesOnSignal() {
  for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], &g_previous[i], nullptr);
}

}  // namespace zdl::io

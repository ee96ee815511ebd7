// [Note: one fatal message] A failure one rank sees alone (out of memory, a write error) ends
// the job through abort_job, with no collective to agree on who prints: the others may be
// blocked in one. Several ranks often fail the same way at once (the same allocation on every
// rank), and each would print the same message. So the ranks share a file name (agreed at
// startup: rank 0's random key) in the temporary directory; the first rank to fail creates the
// file with its message (O_EXCL) and prints; a later rank prints only a message that differs.
// Ranks on other hosts have their own temporary directory: at most one copy per host.
#pragma once
#include <string>

#include "dist/comm/communicator.h"

namespace zdl::io {

class FatalReport {
 public:
  // Collective (a broadcast) when comm has more than one rank.
  explicit FatalReport(dist::Communicator& comm);
  // Whether this rank should print `message` ("[rank r/N] " at its start is not compared).
  bool first_to_say(const std::string& message) const;
  // Before the abort: the rank that made the file gives the others a moment to compare (they
  // fail within milliseconds when they fail alike), then removes it.
  void before_abort() const;

 private:
  std::string path_;
  mutable bool created_ = false;
};

}  // namespace zdl::io

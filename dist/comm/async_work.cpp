// AsyncWork: condition-variable completion with a watchdog timeout (see async_work.h).
#include "dist/comm/async_work.h"

#include <sstream>

namespace zdl::dist {

std::string watchdog_message(const std::string& prefix, const std::string& op, int64_t bytes, CommPhase phase,
                             std::chrono::milliseconds timeout, const std::string& raise_with) {
  std::ostringstream os;
  os << prefix << " watchdog: " << op << " of " << bytes << " bytes (phase " << phase_name(phase)
     << ") did not complete within " << static_cast<double>(timeout.count()) / 1000.0
     << " s; another rank may have died, diverged or be stuck (the collective cannot be cancelled: "
        "end the job with zdl::dist::abort_job, or raise "
     << raise_with << " if it is just slow)";
  return os.str();
}

AsyncWork::AsyncWork(std::string prefix, std::string op, int64_t bytes, CommPhase phase,
                     std::chrono::milliseconds timeout, std::string raise_with)
    : prefix_(std::move(prefix)), op_(std::move(op)), raise_with_(std::move(raise_with)), bytes_(bytes), phase_(phase),
      timeout_(timeout) {}

void AsyncWork::wait() {
  std::function<void()> finisher;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout_, [&] { return finished_; }))
      throw Error(watchdog_message(prefix_, op_, bytes_, phase_, timeout_, raise_with_));
    if (!error_.empty()) throw Error(prefix_ + " " + op_ + " failed: " + error_);
    finisher.swap(finisher_);
  }
  // Outside the lock: the finisher may touch the GPU. It runs once; the buffers it reads stay
  // alive until it has run.
  if (finisher) finisher();
  // Done: let go of the tensors now, not when the last holder of this object (possibly the
  // communication thread) drops it, so a buffer the caller frees after wait() is really gone.
  std::lock_guard<std::mutex> lock(mu_);
  tensors_.clear();
  buffers_.clear();
}

bool AsyncWork::done() {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

std::optional<std::chrono::steady_clock::time_point> AsyncWork::finished_at() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!finished_) return std::nullopt;
  return finished_at_;
}

void AsyncWork::complete() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = true;
    finished_at_ = std::chrono::steady_clock::now();
  }
  cv_.notify_all();
}

void AsyncWork::fail(const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = true;
    finished_at_ = std::chrono::steady_clock::now();
    error_ = message.empty() ? "unknown error" : message;
  }
  cv_.notify_all();
}

}  // namespace zdl::dist

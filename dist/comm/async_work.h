// AsyncWork: the completion handle of a collective that runs on another thread (the MPI
// backend's communication thread). Shared state with a condition variable: the communication
// thread calls complete() or fail(); the caller's wait() blocks up to the timeout taken when the
// collective was issued, then throws the watchdog error (see [Note: watchdog] in
// communicator.h). A failure is rethrown by every wait(), prefixed with "[rank r/N] <op>".
//
//   auto work = std::make_shared<AsyncWork>(comm.prefix(), "all_reduce", bytes, phase, timeout);
//   queue([work] { ...; work->complete(); });   // comm thread
//   work->wait();                               // caller
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "dist/comm/comm_ledger.h"
#include "dist/comm/communicator.h"

namespace zdl::dist {

// The watchdog's message (one place, so every backend says the same):
// "[rank r/N] watchdog: <op> of <bytes> bytes (phase <phase>) did not complete within <T> s; ..."
// `raise_with`: what sets the timeout (Communicator::timeout_set_by).
std::string watchdog_message(const std::string& prefix, const std::string& op, int64_t bytes, CommPhase phase,
                             std::chrono::milliseconds timeout,
                             const std::string& raise_with = "ZDL_COLLECTIVE_TIMEOUT_S");

class AsyncWork final : public Work {
 public:
  AsyncWork(std::string prefix, std::string op, int64_t bytes, CommPhase phase, std::chrono::milliseconds timeout,
            std::string raise_with = "ZDL_COLLECTIVE_TIMEOUT_S");

  void wait() override;
  bool done() override;
  std::optional<std::chrono::steady_clock::time_point> finished_at() override;

  // Communication thread: the collective finished, or failed with `message`.
  void complete();
  void fail(const std::string& message);

  // Runs once on the waiting thread after a successful wait (e.g. copying a staged result back
  // to the GPU on the caller's stream). An exception from it is rethrown by that wait().
  void set_finisher(std::function<void()> f) { finisher_ = std::move(f); }
  // Keeps tensors and buffers alive until a successful wait() returns (or the work is destroyed).
  void keep_alive(Tensor t) { tensors_.push_back(std::move(t)); }
  void keep_alive(std::shared_ptr<void> p) { buffers_.push_back(std::move(p)); }

  const std::string& op() const { return op_; }

 private:
  const std::string prefix_, op_, raise_with_;
  const int64_t bytes_;
  const CommPhase phase_;
  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point finished_at_;
  std::string error_;  // empty: success
  std::function<void()> finisher_;
  std::vector<Tensor> tensors_;
  std::vector<std::shared_ptr<void>> buffers_;
};

// A Work that is already done (the local backend).
class CompletedWork final : public Work {
 public:
  void wait() override {}
  bool done() override { return true; }
  std::optional<std::chrono::steady_clock::time_point> finished_at() override { return made_; }

 private:
  const std::chrono::steady_clock::time_point made_ = std::chrono::steady_clock::now();
};

}  // namespace zdl::dist

// NcclCommunicator: collectives on NCCL for CUDA tensors (CUDA build only).
//
// Choices:
// - Bootstrap over a host communicator of the same ranks (MpiCommunicator, or a
//   LocalCommunicator for one rank without a launcher): rank 0 creates the ncclUniqueId, the
//   host communicator broadcasts it, every rank joins with ncclCommInitRank on its GPU (local
//   rank % device count, chosen by the host communicator). Host-side helpers (barrier,
//   all_gather_i64, all_reduce_sum) run on the host communicator.
// - Collectives run on one communication stream. Each one first waits (cudaStreamWaitEvent) for
//   an event recorded on the caller's compute stream (cudaStreamPerThread, as core/), so it sees
//   the kernels that produced its input; Work::wait makes the compute stream wait for an event
//   recorded after the collective, so the kernels that read the output (and the stream-ordered
//   frees of its buffers) come after it. Compute issued between the two overlaps with it.
// - Work::wait does not block the host: a ZeRO-3 gather waited for before a unit's forward
//   costs the GPU the transfer's remaining time, not the host a synchronization. A watchdog
//   thread times every waited (or dropped) collective, polling its event and
//   ncclCommGetAsyncError; one still running `timeout` after its wait, or an NCCL error, ends
//   the job (abort_job) with the watchdog's message. Work::done() still polls.
//
//   auto comm = dist::init({.device = Device::cuda(), .backend = "nccl"});
//   comm->all_reduce(grad_on_gpu);
#pragma once
#include <memory>

#include "dist/comm/communicator.h"

namespace zdl::dist {

class NcclCommunicator final : public Communicator {
 public:
  // host: a communicator over the same ranks whose device() is this rank's GPU. Collective.
  explicit NcclCommunicator(std::shared_ptr<Communicator> host);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  int local_rank() const override { return host_->local_rank(); }
  int local_size() const override { return host_->local_size(); }
  int64_t host_key() const override { return host_->host_key(); }
  std::string backend() const override { return "nccl"; }

  std::shared_ptr<Work> all_reduce_async(const Tensor& t) override;
  std::shared_ptr<Work> reduce_scatter_async(const Tensor& input, const Tensor& output) override;
  std::shared_ptr<Work> all_gather_async(const Tensor& input, const Tensor& output) override;
  std::shared_ptr<Work> broadcast_async(const Tensor& t, int root) override;
  std::shared_ptr<Work> all_to_all_async(const Tensor& input, const Tensor& output) override;
  void barrier() override { host_->barrier(); }
  std::vector<int64_t> all_gather_i64(int64_t value) override { return host_->all_gather_i64(value); }
  std::vector<double> all_reduce_sums(std::vector<double> values) override {
    return host_->all_reduce_sums(std::move(values));
  }

  struct State;  // NCCL communicator and stream, shared with pending Work

 protected:
  std::shared_ptr<Communicator> split_impl(int color, int key) override;

 private:
  std::shared_ptr<Communicator> host_;
  std::shared_ptr<State> state_;
};

}  // namespace zdl::dist

// MpiCommunicator: collectives on MPI (MPICH or OpenMPI; standard MPI-3 calls only).
//
// Choices:
// - MPI is initialized once per process (MPI_Init_thread asking for MPI_THREAD_MULTIPLE; at least
//   SERIALIZED is required, and then every MPI call takes one process-wide lock) and finalized at
//   exit, unless someone else initialized it.
// - Each communicator duplicates MPI_COMM_WORLD (its own message space, MPI_ERRORS_RETURN so
//   every error reaches the caller as a zdl::Error) and owns one communication thread that runs
//   its collectives in issue order. MPI libraries progress a collective only inside an MPI call,
//   so a collective issued "async" from the compute thread would not move until wait(); on the
//   communication thread it really overlaps with compute.
// - CUDA tensors (CUDA build) are staged through pinned host buffers (CommBuffer in the memory
//   ledger): copied to the host on the caller's stream when issued, back when wait() returns.
// - bf16 and f16 sums use user-defined MPI_Ops that add in float and round to nearest even.
//
//   auto comm = std::make_shared<dist::MpiCommunicator>();   // collective over MPI_COMM_WORLD
//   comm->all_reduce(t);
#pragma once
#include <memory>

#include "dist/comm/communicator.h"

namespace zdl::dist {

class MpiCommunicator final : public Communicator {
 public:
  // Collective over MPI_COMM_WORLD; initializes MPI if needed. A CUDA device selects this rank's
  // GPU by local rank (and makes it current on this thread); CPU tensors are always accepted.
  explicit MpiCommunicator(Device device = Device::cpu());
  // Stops the communication thread and frees the MPI communicator. A thread still blocked in a
  // collective after the timeout (a rank never joined) is left behind with a warning.
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override;
  int size() const override;
  int local_rank() const override;
  int local_size() const override;
  int64_t host_key() const override;
  std::string backend() const override { return "mpi"; }

  std::shared_ptr<Work> all_reduce_async(const Tensor& t) override;
  std::shared_ptr<Work> reduce_scatter_async(const Tensor& input, const Tensor& output) override;
  std::shared_ptr<Work> all_gather_async(const Tensor& input, const Tensor& output) override;
  std::shared_ptr<Work> broadcast_async(const Tensor& t, int root) override;
  std::shared_ptr<Work> all_to_all_async(const Tensor& input, const Tensor& output) override;
  // Recursive halving over point-to-point exchanges when N is a power of two (see
  // [Note: fixed-order reduction]); otherwise the native collectives.
  std::shared_ptr<Work> reduce_scatter_fixed_async(const Tensor& input, const Tensor& output) override;
  std::shared_ptr<Work> all_reduce_fixed_async(const Tensor& t) override;
  bool has_fixed_order() const override;
  void barrier() override;
  std::vector<int64_t> all_gather_i64(int64_t value) override;
  std::vector<double> all_reduce_sums(std::vector<double> values) override;

  // Broadcasts raw host bytes from root, not recorded in the ledger (bootstrap: NCCL's unique id).
  void broadcast_bytes(void* data, size_t bytes, int root);

  // The MPI thread level the process runs at (MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE).
  static int thread_level();

 protected:
  bool accepts_device(Device d) const override { return d.is_cpu() || d == device(); }
  std::shared_ptr<Communicator> split_impl(int color, int key) override;

 private:
  struct Adopt;  // an MPI communicator this one takes over (defined with the MPI types)
  explicit MpiCommunicator(const Adopt& a);
  std::shared_ptr<Work> start_all_reduce(const Tensor& t, bool tree);
  std::shared_ptr<Work> start_reduce_scatter(const Tensor& input, const Tensor& output, bool tree);
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace zdl::dist

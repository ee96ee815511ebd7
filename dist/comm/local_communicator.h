// LocalCommunicator: world size 1 without a launcher or any library (docs/design.md,
// mechanism 5). Collectives are copies (all_gather,
// reduce_scatter) or no-ops (all_reduce, broadcast); they are still checked like the real
// backends and recorded in the CommLedger, with wire bytes 0 ((N-1)/N = 0 for N = 1), so a
// single-process run reports the same payload a multi-rank run does.
//
//   auto comm = std::make_shared<dist::LocalCommunicator>();
//   comm->all_gather(shard, full);  // full = shard
#pragma once
#include "dist/comm/communicator.h"

namespace zdl::dist {

class LocalCommunicator final : public Communicator {
 public:
  // A CUDA device becomes current on this thread.
  explicit LocalCommunicator(Device device = Device::cpu());

  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 1; }
  std::string backend() const override { return "local"; }

  std::shared_ptr<Work> all_reduce_async(const Tensor& t) override;
  std::shared_ptr<Work> reduce_scatter_async(const Tensor& input, const Tensor& output) override;
  std::shared_ptr<Work> all_gather_async(const Tensor& input, const Tensor& output) override;
  std::shared_ptr<Work> broadcast_async(const Tensor& t, int root) override;
  std::shared_ptr<Work> all_to_all_async(const Tensor& input, const Tensor& output) override;
  void barrier() override {}
  std::vector<int64_t> all_gather_i64(int64_t value) override { return {value}; }
  std::vector<double> all_reduce_sums(std::vector<double> values) override;

 protected:
  std::shared_ptr<Communicator> split_impl(int, int) override { return std::make_shared<LocalCommunicator>(device()); }
};

}  // namespace zdl::dist

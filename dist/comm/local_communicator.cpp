// LocalCommunicator: the world-size-1 backend (see local_communicator.h).
#include "dist/comm/local_communicator.h"

#include "dist/comm/async_work.h"
#include "dist/comm/cuda_staging.h"

namespace zdl::dist {

namespace {

// True when a and b view the same bytes (then a copy is unnecessary).
bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.numel() == 0 || (a.storage() == b.storage() && a.offset() == b.offset() && a.numel() == b.numel());
}

// dst = src element by element (both contiguous, same numel; shapes may differ).
void copy_flat(const Tensor& dst, const Tensor& src) {
  if (same_bytes(dst, src)) return;
  dst.copy_(Tensor::from_storage(src.storage(), dst.shape(), contiguous_strides(dst.shape()), src.offset(),
                                 src.dtype()));
}

}  // namespace

LocalCommunicator::LocalCommunicator(Device device)
    : Communicator(device.is_cuda() ? select_cuda_device(device, 0, 1) : device) {}

std::shared_ptr<Work> LocalCommunicator::all_reduce_async(const Tensor& t) {
  check_collective("all_reduce", t, t, 1, 1);
  record(CollectiveKind::AllReduce, static_cast<int64_t>(t.nbytes()));
  return std::make_shared<CompletedWork>();
}

std::shared_ptr<Work> LocalCommunicator::reduce_scatter_async(const Tensor& input, const Tensor& output) {
  check_collective("reduce_scatter", input, output, 1, 1);
  record(CollectiveKind::ReduceScatter, static_cast<int64_t>(input.nbytes()));
  copy_flat(output, input);
  return std::make_shared<CompletedWork>();
}

std::shared_ptr<Work> LocalCommunicator::all_gather_async(const Tensor& input, const Tensor& output) {
  check_collective("all_gather", input, output, 1, 1);
  record(CollectiveKind::AllGather, static_cast<int64_t>(output.nbytes()));
  copy_flat(output, input);
  return std::make_shared<CompletedWork>();
}

std::shared_ptr<Work> LocalCommunicator::all_to_all_async(const Tensor& input, const Tensor& output) {
  check_collective("all_to_all", input, output, 1, 1);
  record(CollectiveKind::AllToAll, static_cast<int64_t>(input.nbytes()));
  copy_flat(output, input);
  return std::make_shared<CompletedWork>();
}

std::shared_ptr<Work> LocalCommunicator::broadcast_async(const Tensor& t, int root) {
  check_collective("broadcast", t, t, 1, 1);
  ZDL_CHECK(root == 0, prefix(), " broadcast: root ", root, " out of range [0, 1)");
  record(CollectiveKind::Broadcast, static_cast<int64_t>(t.nbytes()), /*is_root=*/true);
  return std::make_shared<CompletedWork>();
}

std::vector<double> LocalCommunicator::all_reduce_sums(std::vector<double> values) {
  record(CollectiveKind::AllReduce, static_cast<int64_t>(values.size() * sizeof(double)));
  return values;
}

}  // namespace zdl::dist

// NcclCommunicator (see nccl_communicator.h): RAII wrappers for the NCCL communicator, the
// communication stream and events; the collectives; Work as a stream dependency, timed by the
// watchdog thread.
#include "dist/comm/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "core/cuda_check.h"
#include "dist/comm/async_work.h"
#include "dist/comm/mpi_communicator.h"

#define ZDL_NCCL_CHECK(call)                                                                       \
  do {                                                                                             \
    ncclResult_t zdl_nccl_err_ = (call);                                                           \
    if (zdl_nccl_err_ != ncclSuccess)                                                              \
      ::zdl::detail::throw_error(__FILE__, __LINE__, #call,                                        \
                                 ::zdl::detail::str("NCCL error: ", ncclGetErrorString(zdl_nccl_err_))); \
  } while (0)

namespace zdl::dist {

namespace {

class CudaEvent {
 public:
  CudaEvent() { ZDL_CUDA_CHECK(cudaEventCreateWithFlags(&ev_, cudaEventDisableTiming)); }
  ~CudaEvent() { (void)cudaEventDestroy(ev_); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  cudaEvent_t get() const { return ev_; }

 private:
  cudaEvent_t ev_ = nullptr;
};

class CudaStream {
 public:
  CudaStream() { ZDL_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~CudaStream() { (void)cudaStreamDestroy(s_); }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::BF16: return ncclBfloat16;
    case DType::F16: return ncclFloat16;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
  }
  throw Error(detail::str("no NCCL datatype for dtype ", dtype_name(t)));
}

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && pa < pb + b_bytes && pb < pa + a_bytes;
}

}  // namespace

// [Note: NCCL watchdog] Work::wait() only orders the compute stream after the collective (an
// event dependency): the host goes on queueing kernels. So a collective that never completes
// (a dead or diverged rank) cannot be seen by a blocked wait(); this thread watches every waited
// collective instead. When one is still running `timeout` after its wait(), or NCCL reports an
// asynchronous error, it prints the watchdog message and ends the job (abort_job): the host
// thread may itself be blocked in a synchronization that would never return.
struct NcclCommunicator::State {
  ncclComm_t comm = nullptr;
  CudaStream stream;  // the communication stream (outlives the destructor body below)
  std::atomic<bool> broken{false};  // a watchdog fired: abort instead of destroy

  struct Watched {
    std::shared_ptr<CudaEvent> done;
    std::chrono::steady_clock::time_point deadline;
    std::string message;  // the watchdog message, made when the wait began
    std::string op;       // "[rank r/N] all_gather", for an asynchronous NCCL error
  };

  explicit State(int device) : device_(device) {}

  void watch(Watched w) {
    std::lock_guard<std::mutex> lock(mutex_);
    watched_.push_back(std::move(w));
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  }

  ~State() {
    // The last collectives finish (the watchdog, still running, times them), then the thread
    // stops and the communicator goes.
    if (comm != nullptr && !broken.load()) (void)cudaStreamSynchronize(stream.get());
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    if (comm == nullptr) return;
    if (broken.load()) (void)ncclCommAbort(comm);  // a collective failed: do not wait on the others
    else (void)ncclCommDestroy(comm);
  }

 private:
  [[noreturn]] void fail(const std::string& message) {
    broken.store(true);
    std::fprintf(stderr, "%s\n", message.c_str());
    abort_job(1);
  }

  void run() {
    (void)cudaSetDevice(device_);
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(10));
      const auto now = std::chrono::steady_clock::now();
      for (auto it = watched_.begin(); it != watched_.end();) {
        const cudaError_t q = cudaEventQuery(it->done->get());
        // Done, or a CUDA error (sticky: any kernel's fault shows here): not this thread's to
        // report; the host thread's next synchronization throws it with its context.
        if (q != cudaErrorNotReady) {
          it = watched_.erase(it);
          continue;
        }
        ncclResult_t async_err = ncclSuccess;
        if (ncclCommGetAsyncError(comm, &async_err) == ncclSuccess && async_err != ncclSuccess &&
            async_err != ncclInProgress)
          fail(detail::str(it->op, " failed: NCCL error: ", ncclGetErrorString(async_err)));  // NCCL's own
        if (now > it->deadline) fail(it->message);
        ++it;
      }
    }
  }

  const int device_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<Watched> watched_;
  bool stop_ = false;
  std::thread thread_;
};

namespace {

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<NcclCommunicator::State> state, std::string prefix, std::string op, int64_t bytes,
           CommPhase phase, std::chrono::milliseconds timeout, std::string raise_with, std::vector<Tensor> tensors)
      : state_(std::move(state)), prefix_(std::move(prefix)), op_(std::move(op)), raise_with_(std::move(raise_with)),
        bytes_(bytes), phase_(phase), timeout_(timeout), tensors_(std::move(tensors)) {}

  ~NcclWork() override {
    // Never waited: still order the compute stream after the collective, so the stream-ordered
    // frees of its tensors (which this destructor may trigger) cannot overtake it, and have the
    // watchdog time it (a later synchronization would otherwise wait on it unwatched).
    if (stream_ordered_) return;
    (void)cudaStreamWaitEvent(cudaStreamPerThread, done_->get(), 0);
    try {
      watch();
    } catch (...) {  // out of memory for the entry: the collective is then not timed
    }
  }

  cudaEvent_t done_event() const { return done_->get(); }

  // A stream dependency, not a host block ([Note: NCCL watchdog]): kernels queued after this
  // on the compute stream run after the collective; the watchdog thread times it.
  void wait() override {
    if (stream_ordered_) return;
    ZDL_CUDA_CHECK(cudaStreamWaitEvent(cudaStreamPerThread, done_->get(), 0));
    stream_ordered_ = true;
    watch();
  }

  bool done() override {
    cudaError_t q = cudaEventQuery(done_->get());
    if (q == cudaSuccess) return true;
    if (q != cudaErrorNotReady) {
      (void)cudaGetLastError();
      throw Error(detail::str(prefix_, " ", op_, " failed: CUDA error: ", cudaGetErrorString(q)));
    }
    ncclResult_t async_err = ncclSuccess;
    ZDL_NCCL_CHECK(ncclCommGetAsyncError(state_->comm, &async_err));
    if (async_err != ncclSuccess && async_err != ncclInProgress) {
      state_->broken.store(true);
      throw Error(detail::str(prefix_, " ", op_, " failed: NCCL error: ", ncclGetErrorString(async_err)));
    }
    return false;
  }

 private:
  // The watchdog times the collective from now on.
  void watch() {
    state_->watch({done_, std::chrono::steady_clock::now() + timeout_,
                   watchdog_message(prefix_, op_, bytes_, phase_, timeout_, raise_with_), prefix_ + " " + op_});
  }

  std::shared_ptr<NcclCommunicator::State> state_;
  const std::string prefix_, op_, raise_with_;
  const int64_t bytes_;
  const CommPhase phase_;
  const std::chrono::milliseconds timeout_;
  std::vector<Tensor> tensors_;
  std::shared_ptr<CudaEvent> done_ = std::make_shared<CudaEvent>();
  bool stream_ordered_ = false;
};

}  // namespace

NcclCommunicator::NcclCommunicator(std::shared_ptr<Communicator> host)
    : Communicator(host ? host->device() : Device::cpu()), host_(std::move(host)) {
  ZDL_CHECK(host_ != nullptr, "NcclCommunicator: no host communicator");
  ZDL_CHECK(device().is_cuda(), prefix(), " NcclCommunicator: the host communicator serves ", device().str(),
            "; NCCL needs this rank's GPU (create the host communicator with a CUDA device)");
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (rank() == 0) ZDL_NCCL_CHECK(ncclGetUniqueId(&id));
  if (size() > 1) {
    auto* mpi = dynamic_cast<MpiCommunicator*>(host_.get());
    ZDL_CHECK(mpi != nullptr, prefix(), " NcclCommunicator: bootstrapping ", size(), " ranks needs an MPI host "
              "communicator, got backend ", host_->backend());
    mpi->broadcast_bytes(&id, sizeof(id), 0);
  }
  ZDL_CUDA_CHECK(cudaSetDevice(device().index));
  state_ = std::make_shared<State>(device().index);
  ZDL_NCCL_CHECK(ncclCommInitRank(&state_->comm, size(), id, rank()));
}

NcclCommunicator::~NcclCommunicator() = default;

// A new NCCL communicator bootstrapped over the split host communicator: the same path as the
// world's (ncclCommSplit would save the unique id's broadcast, not worth a second code path).
std::shared_ptr<Communicator> NcclCommunicator::split_impl(int color, int key) {
  return std::make_shared<NcclCommunicator>(host_->split(color, key));
}

namespace {

// Orders the comm stream after the caller's compute stream, runs `issue` on it, and returns a
// Work whose event marks the end of the collective.
template <class Issue>
std::shared_ptr<Work> enqueue(const std::shared_ptr<NcclCommunicator::State>& st, const Communicator& c,
                              const char* op, int64_t bytes, std::vector<Tensor> tensors, Issue issue) {
  auto work = std::make_shared<NcclWork>(st, c.prefix(), op, bytes, current_comm_phase(), c.timeout(),
                                         c.timeout_set_by(), std::move(tensors));
  CudaEvent ready;
  ZDL_CUDA_CHECK(cudaEventRecord(ready.get(), cudaStreamPerThread));
  ZDL_CUDA_CHECK(cudaStreamWaitEvent(st->stream.get(), ready.get(), 0));
  issue(st->stream.get());
  ZDL_CUDA_CHECK(cudaEventRecord(work->done_event(), st->stream.get()));
  return work;
}

}  // namespace

std::shared_ptr<Work> NcclCommunicator::all_reduce_async(const Tensor& t) {
  check_collective("all_reduce", t, t, 1, 1);
  const int64_t bytes = static_cast<int64_t>(t.nbytes());
  void* p = t.raw_data();
  const size_t count = static_cast<size_t>(t.numel());
  const ncclDataType_t type = nccl_type(t.dtype());
  ncclComm_t comm = state_->comm;
  auto work = enqueue(state_, *this, "all_reduce", bytes, {t}, [&](cudaStream_t s) {
    ZDL_NCCL_CHECK(ncclAllReduce(p, p, count, type, ncclSum, comm, s));
  });
  record(CollectiveKind::AllReduce, bytes);
  return work;
}

std::shared_ptr<Work> NcclCommunicator::reduce_scatter_async(const Tensor& input, const Tensor& output) {
  check_collective("reduce_scatter", input, output, size(), 1);
  const int64_t bytes = static_cast<int64_t>(input.nbytes());
  const char* in = static_cast<const char*>(input.raw_data());
  void* out = output.raw_data();
  // NCCL allows in place only at this rank's own block of the input.
  const bool own_block = out == in + static_cast<size_t>(rank()) * output.nbytes();
  ZDL_CHECK(own_block || !overlaps(in, input.nbytes(), out, output.nbytes()), prefix(),
            " reduce_scatter: the output overlaps the input other than at this rank's block ", rank(),
            "; use a separate output or the input's own block");
  const size_t block = static_cast<size_t>(output.numel());
  const ncclDataType_t type = nccl_type(input.dtype());
  ncclComm_t comm = state_->comm;
  auto work = enqueue(state_, *this, "reduce_scatter", bytes, {input, output}, [&](cudaStream_t s) {
    ZDL_NCCL_CHECK(ncclReduceScatter(in, out, block, type, ncclSum, comm, s));
  });
  record(CollectiveKind::ReduceScatter, bytes);
  return work;
}

std::shared_ptr<Work> NcclCommunicator::all_gather_async(const Tensor& input, const Tensor& output) {
  check_collective("all_gather", input, output, 1, size());
  const int64_t bytes = static_cast<int64_t>(output.nbytes());
  const char* in = static_cast<const char*>(input.raw_data());
  char* out = static_cast<char*>(output.raw_data());
  const size_t block_bytes = input.nbytes();
  char* own = out + static_cast<size_t>(rank()) * block_bytes;
  // In place (input == own block) is native; any other overlap moves the input there first.
  const bool move_first = in != own && overlaps(in, block_bytes, out, output.nbytes());
  const size_t block = static_cast<size_t>(input.numel());
  const ncclDataType_t type = nccl_type(input.dtype());
  ncclComm_t comm = state_->comm;
  auto work = enqueue(state_, *this, "all_gather", bytes, {input, output}, [&](cudaStream_t s) {
    if (move_first) ZDL_CUDA_CHECK(cudaMemcpyAsync(own, in, block_bytes, cudaMemcpyDeviceToDevice, s));
    ZDL_NCCL_CHECK(ncclAllGather(move_first ? own : in, out, block, type, comm, s));
  });
  record(CollectiveKind::AllGather, bytes);
  return work;
}

std::shared_ptr<Work> NcclCommunicator::all_to_all_async(const Tensor& input, const Tensor& output) {
  check_collective("all_to_all", input, output, size(), size());
  const int64_t bytes = static_cast<int64_t>(input.nbytes());
  const char* in = static_cast<const char*>(input.raw_data());
  char* out = static_cast<char*>(output.raw_data());
  ZDL_CHECK(!overlaps(in, input.nbytes(), out, output.nbytes()), prefix(),
            " all_to_all: the output overlaps the input (not in place)");
  const int n = size();
  const size_t block = static_cast<size_t>(input.numel() / n), block_bytes = input.nbytes() / static_cast<size_t>(n);
  const ncclDataType_t type = nccl_type(input.dtype());
  ncclComm_t comm = state_->comm;
  auto work = enqueue(state_, *this, "all_to_all", bytes, {input, output}, [&](cudaStream_t s) {
    ZDL_NCCL_CHECK(ncclGroupStart());
    for (int j = 0; j < n; ++j) {
      ZDL_NCCL_CHECK(ncclSend(in + j * block_bytes, block, type, j, comm, s));
      ZDL_NCCL_CHECK(ncclRecv(out + j * block_bytes, block, type, j, comm, s));
    }
    ZDL_NCCL_CHECK(ncclGroupEnd());
  });
  record(CollectiveKind::AllToAll, bytes);
  return work;
}

std::shared_ptr<Work> NcclCommunicator::broadcast_async(const Tensor& t, int root) {
  check_collective("broadcast", t, t, 1, 1);
  ZDL_CHECK(root >= 0 && root < size(), prefix(), " broadcast: root ", root, " out of range [0, ", size(), ")");
  const int64_t bytes = static_cast<int64_t>(t.nbytes());
  void* p = t.raw_data();
  const size_t count = static_cast<size_t>(t.numel());
  const ncclDataType_t type = nccl_type(t.dtype());
  ncclComm_t comm = state_->comm;
  auto work = enqueue(state_, *this, "broadcast", bytes, {t}, [&](cudaStream_t s) {
    ZDL_NCCL_CHECK(ncclBroadcast(p, p, count, type, root, comm, s));
  });
  record(CollectiveKind::Broadcast, bytes, /*is_root=*/rank() == root);
  return work;
}

}  // namespace zdl::dist

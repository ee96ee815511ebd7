// MpiCommunicator (see mpi_communicator.h): the process-wide MPI runtime (init/finalize, the
// bf16/f16 sum ops), the per-communicator communication thread, and the collectives.
#include "dist/comm/mpi_communicator.h"

#include <mpi.h>

#include <atomic>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <iostream>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#include "core/device_copy.h"
#include "dist/comm/async_work.h"
#include "dist/comm/cuda_staging.h"
#include "dist/comm/mpi_check.h"

namespace zdl::dist {

namespace {

// [Note: polite waiting] Ranks often share cores with each other's compute (4 ranks on 2
// cores in CI, or a CPU box running more ranks than cores). A blocking MPI collective
// busy-polls until the slowest rank arrives, stealing the core that rank needs to get there.
// So collectives are started non-blocking and completed here: spin briefly (fast collectives
// finish within microseconds), then poll with short sleeps that hand the core back.
void wait_politely(MPI_Request& req) {
  int done = 0;
  for (int i = 0; i < 200 && !done; ++i) ZDL_MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
  auto nap = std::chrono::microseconds(5);
  while (!done) {
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::microseconds(200));
    ZDL_MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
  }
}

// Starts a non-blocking collective (the request is appended to the arguments) and completes it
// with wait_politely.
#define ZDL_MPI_RUN(start, ...)                            \
  do {                                                     \
    MPI_Request zdl_req_;                                  \
    ZDL_MPI_CHECK(start(__VA_ARGS__, &zdl_req_));          \
    wait_politely(zdl_req_);                               \
  } while (0)


// ---- the process-wide MPI runtime ------------------------------------------------------------

// dst[i] += src[i]; 16-bit floats add in float and round to nearest even once (BFloat16's and
// Half's conversions): the MPI sum ops below and the fixed-order reduction use the same sums.
template <class T>
void add_elements(char* dst, const char* src, int64_t n) {
  auto* d = reinterpret_cast<T*>(dst);
  auto* s = reinterpret_cast<const T*>(src);
  if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>) {
    for (int64_t i = 0; i < n; ++i) d[i] = T(static_cast<float>(d[i]) + static_cast<float>(s[i]));
  } else {
    for (int64_t i = 0; i < n; ++i) d[i] = d[i] + s[i];
  }
}

// The MPI sum ops of 16-bit floats. MPI calls them with inout = in + inout.
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  add_elements<BFloat16>(static_cast<char*>(inout), static_cast<const char*>(in), *len);
}

void f16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  add_elements<Half>(static_cast<char*>(inout), static_cast<const char*>(in), *len);
}

// Initializes MPI on first use and finalizes it at process exit (static destruction), unless MPI
// was initialized by someone else (then they finalize).
class MpiRuntime {
 public:
  static MpiRuntime& get() {
    static MpiRuntime runtime;
    return runtime;
  }

  int level() const { return level_; }
  MPI_Op bf16_sum_op() const { return bf16_sum_; }
  MPI_Op f16_sum_op() const { return f16_sum_; }

  // Below MPI_THREAD_MULTIPLE, MPI calls from different threads must not overlap.
  std::unique_lock<std::mutex> lock() {
    return level_ >= MPI_THREAD_MULTIPLE ? std::unique_lock<std::mutex>() : std::unique_lock<std::mutex>(mu_);
  }

  // A communication thread stuck in a collective (see ~MpiCommunicator): MPI_Finalize would block.
  void note_stuck_thread() { stuck_threads_.fetch_add(1); }

 private:
  MpiRuntime() {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    ZDL_CHECK(!finalized, "MPI was already finalized; zerodl cannot use it any more");
    if (!initialized) {
      int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &level_);
      ZDL_CHECK(rc == MPI_SUCCESS, "MPI_Init_thread failed: ", mpi_error_string(rc));
      owner_ = true;
    } else {
      ZDL_MPI_CHECK(MPI_Query_thread(&level_));
    }
    ZDL_CHECK(level_ >= MPI_THREAD_SERIALIZED, "MPI provides thread level ", level_,
              " but zerodl needs MPI_THREAD_SERIALIZED (", MPI_THREAD_SERIALIZED, ") or MULTIPLE (",
              MPI_THREAD_MULTIPLE, ") for its communication thread; use an MPI built with thread support",
              owner_ ? "" : " (or initialize MPI with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...))");
    ZDL_MPI_CHECK(MPI_Op_create(&bf16_sum, /*commute=*/1, &bf16_sum_));
    ZDL_MPI_CHECK(MPI_Op_create(&f16_sum, /*commute=*/1, &f16_sum_));
  }

  ~MpiRuntime() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;  // whoever initialized MPI already finalized it
    if (stuck_threads_.load() > 0) {
      // Finalize would wait for the stuck collective forever; exit without it (the launcher
      // notices). The caller should have called abort_job() (see [Note: watchdog]).
      std::cerr << "zerodl: " << stuck_threads_.load()
                << " MPI communication thread(s) still blocked in a collective at exit; skipping MPI_Finalize\n";
      return;
    }
    MPI_Op_free(&bf16_sum_);
    MPI_Op_free(&f16_sum_);
    if (owner_) MPI_Finalize();
  }

  int level_ = MPI_THREAD_SINGLE;
  bool owner_ = false;
  MPI_Op bf16_sum_ = MPI_OP_NULL, f16_sum_ = MPI_OP_NULL;
  std::mutex mu_;
  std::atomic<int> stuck_threads_{0};
};

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
    case DType::BF16:
    case DType::F16: return MPI_UINT16_T;  // raw bits; sums use the user-defined ops
  }
  throw Error(detail::str("no MPI datatype for dtype ", dtype_name(t)));
}

MPI_Op sum_op(DType t) {
  if (t == DType::BF16) return MpiRuntime::get().bf16_sum_op();
  if (t == DType::F16) return MpiRuntime::get().f16_sum_op();
  return MPI_SUM;
}

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && pa < pb + b_bytes && pb < pa + a_bytes;
}

// Host bytes of a tensor for MPI: the tensor's own bytes on the CPU, a pinned copy for CUDA.
struct HostBytes {
  char* ptr = nullptr;
  std::shared_ptr<PinnedBuffer> pinned;  // set when staged
};

HostBytes host_bytes(const Tensor& t, bool copy_in) {
  HostBytes h;
  if (t.device().is_cpu()) {
    h.ptr = static_cast<char*>(t.raw_data());
    return h;
  }
  h.pinned = std::make_shared<PinnedBuffer>(t.nbytes());
  h.ptr = static_cast<char*>(h.pinned->data());
  // On the caller's stream (cudaStreamPerThread), after the kernels that produced t.
  if (copy_in) copy_bytes(h.ptr, Device::cpu(), t.raw_data(), t.device(), t.nbytes());
  return h;
}

// After a staged collective: the result goes back to the GPU on the waiting thread.
void copy_back_when_done(AsyncWork& w, const Tensor& t, const HostBytes& h) {
  if (!h.pinned) return;
  std::shared_ptr<PinnedBuffer> pinned = h.pinned;
  w.keep_alive(std::static_pointer_cast<void>(pinned));
  w.set_finisher([t, pinned] { copy_bytes(t.raw_data(), t.device(), pinned->data(), Device::cpu(), t.nbytes()); });
}

// A collective's input (copied to the host) and output (copied back when the work is waited
// for), both kept alive by the work until then.
struct StagedPair {
  HostBytes in, out;
};
StagedPair stage_pair(AsyncWork& work, const Tensor& input, const Tensor& output) {
  StagedPair p{host_bytes(input, /*copy_in=*/true), host_bytes(output, /*copy_in=*/false)};
  work.keep_alive(input);
  work.keep_alive(output);
  if (p.in.pinned) work.keep_alive(std::static_pointer_cast<void>(p.in.pinned));
  copy_back_when_done(work, output, p.out);
  return p;
}

int checked_count(const Communicator& c, const char* op, int64_t n) {
  ZDL_CHECK(n <= INT_MAX, c.prefix(), " ", op, ": ", n, " elements exceed MPI's int count limit ", INT_MAX,
            "; split the buffer into smaller units");
  return static_cast<int>(n);
}

bool is_power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

// dst[i] += src[i] in dtype t.
void add_into(DType t, char* dst, const char* src, int64_t n) {
  switch (t) {
    case DType::F32: return add_elements<float>(dst, src, n);
    case DType::F64: return add_elements<double>(dst, src, n);
    case DType::BF16: return add_elements<BFloat16>(dst, src, n);
    case DType::F16: return add_elements<Half>(dst, src, n);
    case DType::I32: return add_elements<int32_t>(dst, src, n);
    case DType::I64: return add_elements<int64_t>(dst, src, n);
  }
}

// On the communication thread, N a power of two: recursive halving over buf (N blocks of
// `block` elements). At distance d = N/2, N/4, ..., 1 a rank keeps the half of its current
// block range that holds its own block, sends the other half to rank ^ d and adds what that
// rank sends back; buf's block `rank` ends as the pairwise tree of [Note: fixed-order reduction].
void halving_reduce_scatter(char* buf, int block, DType t, int rank, int size, MPI_Comm comm) {
  const size_t block_bytes = static_cast<size_t>(block) * element_size(t);
  const MPI_Datatype type = mpi_type(t);
  std::vector<char> recv(block_bytes * static_cast<size_t>(size / 2));
  int lo = 0, cnt = size;
  for (int d = size / 2; d >= 1; d /= 2) {
    const int half = cnt / 2, partner = rank ^ d;
    const int keep = (rank & d) == 0 ? lo : lo + half, give = keep == lo ? lo + half : lo;
    const int count = half * block;
    MPI_Request req[2];
    ZDL_MPI_CHECK(MPI_Irecv(recv.data(), count, type, partner, 0, comm, &req[0]));
    ZDL_MPI_CHECK(MPI_Isend(buf + static_cast<size_t>(give) * block_bytes, count, type, partner, 0, comm, &req[1]));
    wait_politely(req[0]);
    wait_politely(req[1]);
    add_into(t, buf + static_cast<size_t>(keep) * block_bytes, recv.data(), count);
    lo = keep;
    cnt = half;
  }
}

}  // namespace

// ---- the communication thread --------------------------------------------------------------

struct MpiCommunicator::State {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1, local_rank = 0, local_size = 1;
  int64_t host_key = 0;  // this communicator's lowest rank on this host

  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> queue;
  bool stop = false;
  bool exited = false;
  std::thread thread;

  void run() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stop || !queue.empty(); });
        if (queue.empty()) break;  // stop requested and nothing left
        task = std::move(queue.front());
        queue.pop_front();
      }
      task();
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      exited = true;
    }
    cv.notify_all();
  }

  // Runs fn on the communication thread; its exception (an MPI error) fails the work.
  void submit(const std::shared_ptr<AsyncWork>& work, std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mu);
      queue.emplace_back([work, fn = std::move(fn)]() mutable {
        // The closure holds the collective's tensors: drop it before waking the waiter, so a
        // buffer the caller frees right after wait() is really gone (the memory ledger and
        // ZeRO-3's released storages depend on it).
        auto body = std::move(fn);
        try {
          auto mpi_lock = MpiRuntime::get().lock();
          body();
        } catch (const std::exception& e) {
          body = nullptr;
          work->fail(e.what());
          return;
        }
        body = nullptr;
        work->complete();
      });
    }
    cv.notify_all();
  }
};

struct MpiCommunicator::Adopt {
  MPI_Comm comm;  // a duplicate or a split: a message space of its own, freed with the communicator
  Device device;
  bool pick_gpu;  // by local rank (the world); a split keeps its parent's GPU
};

namespace {
MPI_Comm duplicate_world() {
  MPI_Comm world = MPI_COMM_NULL;
  auto lock = MpiRuntime::get().lock();
  ZDL_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &world));
  return world;
}
}  // namespace

MpiCommunicator::MpiCommunicator(Device device) : MpiCommunicator(Adopt{duplicate_world(), device, true}) {}

MpiCommunicator::MpiCommunicator(const Adopt& a) : Communicator(Device::cpu()), state_(std::make_shared<State>()) {
  State& s = *state_;
  const Device device = a.device;
  {
    auto lock = MpiRuntime::get().lock();
    s.comm = a.comm;
    ZDL_MPI_CHECK(MPI_Comm_set_errhandler(s.comm, MPI_ERRORS_RETURN));
    ZDL_MPI_CHECK(MPI_Comm_rank(s.comm, &s.rank));
    ZDL_MPI_CHECK(MPI_Comm_size(s.comm, &s.size));
    MPI_Comm node = MPI_COMM_NULL;
    ZDL_MPI_CHECK(MPI_Comm_split_type(s.comm, MPI_COMM_TYPE_SHARED, s.rank, MPI_INFO_NULL, &node));
    ZDL_MPI_CHECK(MPI_Comm_rank(node, &s.local_rank));
    ZDL_MPI_CHECK(MPI_Comm_size(node, &s.local_size));
    int lowest = s.rank;
    ZDL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &lowest, 1, MPI_INT, MPI_MIN, node));
    s.host_key = lowest;
    ZDL_MPI_CHECK(MPI_Comm_free(&node));
    if (device.is_cuda()) set_device(a.pick_gpu ? select_cuda_device(device, s.local_rank, s.local_size) : device);
  }
  s.thread = std::thread([st = state_] { st->run(); });
}

std::shared_ptr<Communicator> MpiCommunicator::split_impl(int color, int key) {
  // On the communication thread: a collective on this communicator, in order with the others.
  auto out = std::make_shared<MPI_Comm>(MPI_COMM_NULL);
  auto work = std::make_shared<AsyncWork>(prefix(), "split", 0, current_comm_phase(), timeout(),
                                          timeout_set_by());
  MPI_Comm comm = state_->comm;
  state_->submit(work, [=] { ZDL_MPI_CHECK(MPI_Comm_split(comm, color, key, out.get())); });
  work->wait();
  return std::shared_ptr<Communicator>(new MpiCommunicator(Adopt{*out, device(), false}));
}

MpiCommunicator::~MpiCommunicator() {
  State& s = *state_;
  bool exited;
  {
    std::unique_lock<std::mutex> lock(s.mu);
    s.stop = true;
    s.cv.notify_all();
    exited = s.cv.wait_for(lock, timeout(), [&] { return s.exited; });
  }
  if (!exited) {
    // Blocked in a collective some rank never joined: it cannot be cancelled. The thread keeps
    // the state (and the MPI communicator) alive; MPI is not finalized at exit.
    std::cerr << prefix() << " MpiCommunicator: communication thread still blocked in a collective after "
              << timeout().count() / 1000.0 << " s; leaving it behind (end the job with dist::abort_job)\n";
    MpiRuntime::get().note_stuck_thread();
    s.thread.detach();
    return;
  }
  s.thread.join();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) {
    auto lock = MpiRuntime::get().lock();
    MPI_Comm_free(&s.comm);  // nothing to do on failure in a destructor
  }
}

int MpiCommunicator::rank() const { return state_->rank; }
int MpiCommunicator::size() const { return state_->size; }
int MpiCommunicator::local_rank() const { return state_->local_rank; }
int MpiCommunicator::local_size() const { return state_->local_size; }
int64_t MpiCommunicator::host_key() const { return state_->host_key; }

int MpiCommunicator::thread_level() { return MpiRuntime::get().level(); }

std::shared_ptr<Work> MpiCommunicator::all_reduce_async(const Tensor& t) { return start_all_reduce(t, false); }

std::shared_ptr<Work> MpiCommunicator::all_reduce_fixed_async(const Tensor& t) {
  return start_all_reduce(t, has_fixed_order() && size() > 1 && t.numel() % size() == 0);
}

std::shared_ptr<Work> MpiCommunicator::reduce_scatter_async(const Tensor& input, const Tensor& output) {
  return start_reduce_scatter(input, output, false);
}

std::shared_ptr<Work> MpiCommunicator::reduce_scatter_fixed_async(const Tensor& input, const Tensor& output) {
  return start_reduce_scatter(input, output, has_fixed_order() && size() > 1);
}

bool MpiCommunicator::has_fixed_order() const { return is_power_of_two(size()); }

// tree: recursive halving then an in-place all-gather ([Note: fixed-order reduction]); else
// MPI's own all-reduce.
std::shared_ptr<Work> MpiCommunicator::start_all_reduce(const Tensor& t, bool tree) {
  check_collective("all_reduce", t, t, 1, 1);
  const int count = checked_count(*this, "all_reduce", t.numel());
  const int64_t bytes = static_cast<int64_t>(t.nbytes());
  auto work = std::make_shared<AsyncWork>(prefix(), "all_reduce", bytes, current_comm_phase(), timeout(),
                                          timeout_set_by());
  HostBytes h = host_bytes(t, /*copy_in=*/true);
  work->keep_alive(t);
  copy_back_when_done(*work, t, h);
  record(CollectiveKind::AllReduce, bytes);
  const DType dt = t.dtype();
  const MPI_Datatype type = mpi_type(dt);
  const MPI_Op op = sum_op(dt);
  const int r = rank(), n = size();
  MPI_Comm comm = state_->comm;
  char* p = h.ptr;
  state_->submit(work, [=] {
    if (!tree) {
      ZDL_MPI_RUN(MPI_Iallreduce, MPI_IN_PLACE, p, count, type, op, comm);
      return;
    }
    halving_reduce_scatter(p, count / n, dt, r, n, comm);
    ZDL_MPI_RUN(MPI_Iallgather, MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, p, count / n, type, comm);
  });
  return work;
}

// tree: recursive halving in the input (which it overwrites), then the own block to the
// output; else MPI's own reduce-scatter.
std::shared_ptr<Work> MpiCommunicator::start_reduce_scatter(const Tensor& input, const Tensor& output, bool tree) {
  check_collective("reduce_scatter", input, output, size(), 1);
  const int count = checked_count(*this, "reduce_scatter", input.numel());
  const int block = count / size();
  const int64_t bytes = static_cast<int64_t>(input.nbytes());
  auto work = std::make_shared<AsyncWork>(prefix(), "reduce_scatter", bytes, current_comm_phase(), timeout(),
                                          timeout_set_by());
  const auto [in, out] = stage_pair(*work, input, output);
  // MPI forbids aliased buffers; an output inside the input gets its result through a temporary.
  std::shared_ptr<std::vector<char>> tmp;
  if (!tree && overlaps(in.ptr, input.nbytes(), out.ptr, output.nbytes())) {
    tmp = std::make_shared<std::vector<char>>(output.nbytes());
    work->keep_alive(std::static_pointer_cast<void>(tmp));
  }
  record(CollectiveKind::ReduceScatter, bytes);
  const DType dt = input.dtype();
  const MPI_Datatype type = mpi_type(dt);
  const MPI_Op op = sum_op(dt);
  const int r = rank(), n = size();
  MPI_Comm comm = state_->comm;
  char* src = in.ptr;
  char* dst = out.ptr;
  const size_t out_bytes = output.nbytes();
  state_->submit(work, [=] {
    if (tree) {
      halving_reduce_scatter(src, block, dt, r, n, comm);
      std::memmove(dst, src + static_cast<size_t>(r) * out_bytes, out_bytes);  // may be the same bytes
      return;
    }
    ZDL_MPI_RUN(MPI_Ireduce_scatter_block, src, tmp ? tmp->data() : dst, block, type, op, comm);
    if (tmp) std::memcpy(dst, tmp->data(), out_bytes);
  });
  return work;
}

std::shared_ptr<Work> MpiCommunicator::all_gather_async(const Tensor& input, const Tensor& output) {
  check_collective("all_gather", input, output, 1, size());
  const int total = checked_count(*this, "all_gather", output.numel());
  const int block = total / size();
  const int64_t bytes = static_cast<int64_t>(output.nbytes());
  const size_t block_bytes = input.nbytes();
  auto work = std::make_shared<AsyncWork>(prefix(), "all_gather", bytes, current_comm_phase(), timeout(),
                                          timeout_set_by());
  work->keep_alive(input);
  work->keep_alive(output);
  HostBytes out = host_bytes(output, /*copy_in=*/false);
  copy_back_when_done(*work, output, out);
  char* own_block = out.ptr + static_cast<size_t>(rank()) * block_bytes;
  // In place whenever possible: this rank's block of the (host) output holds its input.
  bool in_place;
  const char* src = nullptr;
  if (out.pinned) {
    if (block_bytes) copy_bytes(own_block, Device::cpu(), input.raw_data(), input.device(), block_bytes);
    in_place = true;
  } else {
    src = static_cast<const char*>(input.raw_data());
    in_place = src == own_block;
    if (!in_place && overlaps(src, block_bytes, out.ptr, output.nbytes())) {
      std::memmove(own_block, src, block_bytes);  // input inside the output, not at its own block
      in_place = true;
    }
  }
  record(CollectiveKind::AllGather, bytes);
  MPI_Datatype type = mpi_type(input.dtype());
  MPI_Comm comm = state_->comm;
  char* dst = out.ptr;
  state_->submit(work, [=] {
    if (in_place) ZDL_MPI_RUN(MPI_Iallgather, MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, dst, block, type, comm);
    else ZDL_MPI_RUN(MPI_Iallgather, src, block, type, dst, block, type, comm);
  });
  return work;
}

std::shared_ptr<Work> MpiCommunicator::broadcast_async(const Tensor& t, int root) {
  check_collective("broadcast", t, t, 1, 1);
  ZDL_CHECK(root >= 0 && root < size(), prefix(), " broadcast: root ", root, " out of range [0, ", size(), ")");
  const int count = checked_count(*this, "broadcast", t.numel());
  const int64_t bytes = static_cast<int64_t>(t.nbytes());
  auto work = std::make_shared<AsyncWork>(prefix(), "broadcast", bytes, current_comm_phase(), timeout(),
                                          timeout_set_by());
  HostBytes h = host_bytes(t, /*copy_in=*/rank() == root);
  work->keep_alive(t);
  if (rank() != root) copy_back_when_done(*work, t, h);
  else if (h.pinned) work->keep_alive(std::static_pointer_cast<void>(h.pinned));
  record(CollectiveKind::Broadcast, bytes, /*is_root=*/rank() == root);
  MPI_Datatype type = mpi_type(t.dtype());
  MPI_Comm comm = state_->comm;
  char* p = h.ptr;
  state_->submit(work, [=] { ZDL_MPI_RUN(MPI_Ibcast, p, count, type, root, comm); });
  return work;
}

std::shared_ptr<Work> MpiCommunicator::all_to_all_async(const Tensor& input, const Tensor& output) {
  check_collective("all_to_all", input, output, size(), size());
  const int count = checked_count(*this, "all_to_all", input.numel());
  const int block = count / size();
  const int64_t bytes = static_cast<int64_t>(input.nbytes());
  ZDL_CHECK(!overlaps(input.raw_data(), input.nbytes(), output.raw_data(), output.nbytes()), prefix(),
            " all_to_all: the output overlaps the input (not in place)");
  auto work = std::make_shared<AsyncWork>(prefix(), "all_to_all", bytes, current_comm_phase(), timeout(),
                                          timeout_set_by());
  const auto [in, out] = stage_pair(*work, input, output);
  record(CollectiveKind::AllToAll, bytes);
  const MPI_Datatype type = mpi_type(input.dtype());
  MPI_Comm comm = state_->comm;
  const char* src = in.ptr;
  char* dst = out.ptr;
  state_->submit(work, [=] { ZDL_MPI_RUN(MPI_Ialltoall, src, block, type, dst, block, type, comm); });
  return work;
}

void MpiCommunicator::barrier() {
  auto work = std::make_shared<AsyncWork>(prefix(), "barrier", 0, current_comm_phase(), timeout(),
                                          timeout_set_by());
  MPI_Comm comm = state_->comm;
  state_->submit(work, [=] { ZDL_MPI_RUN(MPI_Ibarrier, comm); });
  work->wait();
}

std::vector<int64_t> MpiCommunicator::all_gather_i64(int64_t value) {
  auto out = std::make_shared<std::vector<int64_t>>(static_cast<size_t>(size()));
  auto work = std::make_shared<AsyncWork>(prefix(), "all_gather_i64", static_cast<int64_t>(sizeof(int64_t)) * size(),
                                          current_comm_phase(), timeout(),
                                          timeout_set_by());
  MPI_Comm comm = state_->comm;
  state_->submit(work, [=] { ZDL_MPI_RUN(MPI_Iallgather, &value, 1, MPI_INT64_T, out->data(), 1, MPI_INT64_T, comm); });
  work->wait();
  return *out;
}

std::vector<double> MpiCommunicator::all_reduce_sums(std::vector<double> values) {
  const int64_t bytes = static_cast<int64_t>(values.size() * sizeof(double));
  const int count = checked_count(*this, "all_reduce_sums", static_cast<int64_t>(values.size()));
  // Shared with the comm thread: a watchdog timeout may leave the operation behind.
  auto v = std::make_shared<std::vector<double>>(std::move(values));
  auto work = std::make_shared<AsyncWork>(prefix(), "all_reduce_sums", bytes, current_comm_phase(), timeout(),
                                          timeout_set_by());
  record(CollectiveKind::AllReduce, bytes);
  MPI_Comm comm = state_->comm;
  state_->submit(work, [=] { ZDL_MPI_RUN(MPI_Iallreduce, MPI_IN_PLACE, v->data(), count, MPI_DOUBLE, MPI_SUM, comm); });
  work->wait();
  return std::move(*v);
}

void MpiCommunicator::broadcast_bytes(void* data, size_t bytes, int root) {
  ZDL_CHECK(root >= 0 && root < size(), prefix(), " broadcast_bytes: root ", root, " out of range [0, ", size(), ")");
  const int count = checked_count(*this, "broadcast_bytes", static_cast<int64_t>(bytes));
  auto work = std::make_shared<AsyncWork>(prefix(), "broadcast_bytes", static_cast<int64_t>(bytes),
                                          current_comm_phase(), timeout(),
                                          timeout_set_by());
  MPI_Comm comm = state_->comm;
  state_->submit(work, [=] { ZDL_MPI_RUN(MPI_Ibcast, data, count, MPI_BYTE, root, comm); });
  work->wait();
}

// ---- abort -----------------------------------------------------------------------------------

void abort_job(int code) {
  // The caller printed why. MPI_Abort tears the job down at once, and a launcher may drop what
  // a rank wrote last before forwarding it: flush, and give it a moment to get out.
  std::fflush(nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace zdl::dist

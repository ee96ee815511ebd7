// dist::Communicator: the collectives zerodl's partition manager needs, on real libraries
// (docs/design.md, mechanism 5). Backends, one per file:
//   LocalCommunicator  world size 1, no launcher, no library calls (collectives are copies)
//   MpiCommunicator    MPI (MPICH or OpenMPI); CPU tensors, CUDA tensors staged through
//                      pinned host memory
//   NcclCommunicator   NCCL on CUDA tensors, on its own stream; ncclUniqueId broadcast over MPI
//                      (CUDA build only)
//
// Semantics: tensors are contiguous and on the communicator's device (the MPI backend also
// takes CPU tensors); dtypes f32, f64, bf16, f16, i32, i64; reductions are sums
// (callers divide); all_gather / reduce_scatter use equal blocks (output / input holds N
// blocks, rank r's block at r). Async variants return a Work handle; the tensors must stay
// alive until wait() returns (the handle keeps them alive; their storage must not be released
// before then). Every collective records its bytes in the CommLedger under the thread's
// CommPhase. A wait that does not complete within the timeout throws a zdl::Error (the
// watchdog) instead of hanging. Every error message starts with "[rank r/N]".
//
// [Note: watchdog] A collective that some rank never joins cannot be cancelled: MPI has no way
// to abandon a started collective, and NCCL only by aborting the whole communicator. The
// watchdog therefore reports instead of recovering. The work stays pending (it completes, and
// a later wait() succeeds, if the missing ranks join late), but a job whose ranks diverged is
// usually lost: catch the error at the top level, print it, and call abort_job(1), which ends
// every rank (MPI_Abort) instead of leaving them blocked.
//
// [Note: ordering] Every rank must issue the same collectives in the same order on a
// communicator (as in MPI and NCCL). The MPI backend runs them, in issue order, on one
// communication thread per communicator, so async collectives progress while the caller
// computes; host-side helpers (barrier, all_gather_i64, all_reduce_sum) go through the same
// queue. Issue a communicator's collectives from one thread (their order must not depend on
// thread timing). A collective stuck after a watchdog error holds up the ones queued behind it.
// init() is itself collective: every rank calls it the same number of times, and each call
// returns a new communicator (its own MPI communicator and thread).
//
//   auto comm = dist::init();                         // world size 1 without mpirun
//   comm->all_reduce(grad);                           // in place, sum
//   auto work = comm->all_gather_async(shard, full);  // overlap: do something, then
//   work->wait();
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "dist/comm/comm_ledger.h"

namespace zdl::dist {

// Completion handle of an async collective.
class Work {
 public:
  virtual ~Work() = default;
  // Makes the result usable: blocks until done (MPI, local), or, for NCCL on CUDA tensors,
  // orders this thread's GPU stream after the collective and returns (what runs on the stream
  // afterwards sees the result; reading it on the host synchronizes as any GPU read does).
  // Throws on failure or after the communicator's timeout (NCCL: its watchdog thread ends the
  // job, since nothing on the host is blocked to receive an exception).
  virtual void wait() = 0;
  // Non-blocking check.
  virtual bool done() = 0;
  // When the collective itself finished (its bytes arrived), which may be long before wait() is
  // called; nullopt while running, or where the backend cannot tell (NCCL: on the GPU's stream).
  virtual std::optional<std::chrono::steady_clock::time_point> finished_at() { return std::nullopt; }
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Rank among the processes on this host (selects the GPU), and how many there are.
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  // Equal on the ranks of one host, different across hosts (find_nodes' key).
  virtual int64_t host_key() const { return 0; }
  virtual std::string backend() const = 0;  // "local", "mpi", "nccl"
  // The device the communicator serves: CPU, or this rank's GPU.
  Device device() const { return device_; }
  // "[rank r/N]", the prefix of every dist/ error message.
  std::string prefix() const;

  // ---- topology (docs/multinode.md) ----
  // The node (host) of each of this communicator's ranks, numbered 0.. in order of first
  // appearance; one node (all 0) unless init() found several hosts or set_ranks_per_node said so.
  std::vector<int> nodes() const;
  int node() const { return nodes_.empty() ? 0 : nodes_[static_cast<size_t>(rank())]; }
  int num_nodes() const;
  // Its ranks sit on more than one node: its collectives' wire bytes are inter-node traffic
  // ([Note: inter-node bytes] in comm_ledger.h).
  bool spans_nodes() const { return num_nodes() > 1; }
  // Poses the ranks as size() / k nodes of k consecutive ranks (rank r on node r / k), as a job
  // of that many hosts would be laid out: multi-node layouts tried on one machine. k must divide
  // size(). Not collective (every rank sets the same k); communicators split off afterwards
  // inherit it.
  void set_ranks_per_node(int k);
  // Collective: the nodes from the hosts the ranks run on (ranks sharing memory, as the launcher
  // placed them). init() calls it.
  void find_nodes();
  // Collective over this communicator: the ranks passing the same color form a new communicator
  // (with its own queue and, for MPI, its own message space), ranked by key, then by rank here.
  // The new communicator knows the nodes of its ranks. Every rank calls it with a color >= 0.
  std::shared_ptr<Communicator> split(int color, int key);

  // In place: t = sum over ranks of t.
  virtual std::shared_ptr<Work> all_reduce_async(const Tensor& t) = 0;
  // input: N * n elements; output: n elements = sum over ranks of input block `rank`.
  virtual std::shared_ptr<Work> reduce_scatter_async(const Tensor& input, const Tensor& output) = 0;
  // input: n elements; output: N * n elements, block r = rank r's input. input may alias
  // output's own block (in-place all-gather).
  virtual std::shared_ptr<Work> all_gather_async(const Tensor& input, const Tensor& output) = 0;
  virtual std::shared_ptr<Work> broadcast_async(const Tensor& t, int root) = 0;
  // input and output: N blocks each; block j of the input goes to rank j, and block j of the
  // output is what rank j sent this rank. Not in place. (ZeRO++'s quantized reduction.)
  virtual std::shared_ptr<Work> all_to_all_async(const Tensor& input, const Tensor& output) = 0;

  // [Note: fixed-order reduction] The same sums in a fixed order: for N a power of two, block
  // r's sum is a balanced pairwise tree over the ranks in which rank i sits at leaf
  // bit_reverse(i) (the ranks are paired at distance N/2 first, then N/4, ...: recursive
  // halving). Each rank sends (N-1)/N of the buffer, as a ring does, so the bytes are the
  // native collective's. The input's contents are undefined afterwards (it is the work
  // buffer). ZeRO's exact mode builds bit-identical training across world sizes on it
  // (docs/exactness.md). Backends without one (NCCL, and any N not a power of two) run the
  // native collective: deterministic run to run, but not tree-shaped.
  virtual std::shared_ptr<Work> reduce_scatter_fixed_async(const Tensor& input, const Tensor& output) {
    return reduce_scatter_async(input, output);
  }
  // In place: the fixed-order reduce-scatter, then an all-gather (the same tree for every block).
  virtual std::shared_ptr<Work> all_reduce_fixed_async(const Tensor& t) { return all_reduce_async(t); }
  // Whether the *_fixed_async collectives really follow the tree (false: they fall back).
  virtual bool has_fixed_order() const { return size() == 1; }
  // Blocks until every rank reached it (host-side; with NCCL it does not order GPU work).
  virtual void barrier() = 0;

  // Host-side metadata exchange (not counted in the ledger): every rank's value, in rank order.
  // Used for divergence checks and small agreements (e.g. "did any rank see a NaN").
  virtual std::vector<int64_t> all_gather_i64(int64_t value) = 0;
  // Element-wise sums of a few doubles over ranks (gradient-norm squares, losses, per-unit
  // flags); not model traffic, but recorded under CollectiveKind::AllReduce / current phase
  // with 8 bytes per value. Every rank passes the same count.
  virtual std::vector<double> all_reduce_sums(std::vector<double> values) = 0;
  double all_reduce_sum(double value) { return all_reduce_sums({value})[0]; }
  // Rank `root`'s string on every rank (host-side, through all_gather_i64, 8 bytes a round:
  // for messages, e.g. the error only one rank saw, on every backend).
  std::string broadcast_string(const std::string& s, int root);
  // Collective: throws on every rank, naming rank 0's `mine` and the first rank's that differs,
  // when the ranks' strings are not all equal ("ranks were given different <what>: rank 0 has
  // {..}, rank r has {..}"). One all-gather of a hash when they agree.
  void check_same_on_every_rank(const std::string& mine, const std::string& what);

  void all_reduce(const Tensor& t) { all_reduce_async(t)->wait(); }
  void reduce_scatter(const Tensor& input, const Tensor& output) { reduce_scatter_async(input, output)->wait(); }
  void all_gather(const Tensor& input, const Tensor& output) { all_gather_async(input, output)->wait(); }
  void broadcast(const Tensor& t, int root) { broadcast_async(t, root)->wait(); }

  // Watchdog: how long wait() may block before it throws (default 300 s; env
  // ZDL_COLLECTIVE_TIMEOUT_S overrides the default). A collective's timeout is taken when it
  // is issued.
  // The longest timeout: a deadline past the clock's range would wrap around and fire at once.
  static constexpr std::chrono::milliseconds kMaxTimeout{int64_t{365} * 86400 * 1000};  // a year
  // Clamped to [1 ms, kMaxTimeout]. `set_by`: what the watchdog's message tells a user to raise
  // (a program's flag, say "--collective-timeout"); the environment variable does nothing then.
  void set_timeout(std::chrono::milliseconds t, std::string set_by = "Communicator::set_timeout") {
    timeout_ = std::clamp(t, std::chrono::milliseconds(1), kMaxTimeout);
    timeout_set_by_ = std::move(set_by);
  }
  std::chrono::milliseconds timeout() const { return timeout_; }
  const std::string& timeout_set_by() const { return timeout_set_by_; }

 protected:
  // Timeout from ZDL_COLLECTIVE_TIMEOUT_S (seconds, may be fractional) or 300 s.
  explicit Communicator(Device device = Device::cpu());
  // The backend's split: a new communicator of the ranks with this color (collective).
  virtual std::shared_ptr<Communicator> split_impl(int color, int key) = 0;
  // Records one collective of this communicator in the CommLedger (inter-node when it spans nodes).
  void record(CollectiveKind kind, int64_t payload_bytes, bool is_root = false) const;
  // Sets the node of every rank (size() entries, any ids: renumbered by first appearance).
  void set_nodes(const std::vector<int64_t>& ids);
  // Checks definedness, contiguity, dtype and device of a collective's tensors a (input) and b
  // (output), and that a holds a_blocks and b holds b_blocks blocks of one common block size
  // (reduce_scatter: a_blocks = N, b_blocks = 1); throws with the prefix and both sizes.
  void check_collective(const char* op, const Tensor& a, const Tensor& b, int64_t a_blocks, int64_t b_blocks) const;
  // Whether a collective may run on tensors on `d` (default: only device()).
  virtual bool accepts_device(Device d) const { return d == device_; }
  // For backends that learn their GPU only after the base is built (by local rank).
  void set_device(Device d) { device_ = d; }

 private:
  Device device_;
  std::chrono::milliseconds timeout_;
  std::string timeout_set_by_ = "ZDL_COLLECTIVE_TIMEOUT_S";
  std::vector<int> nodes_;  // per rank; empty: all on node 0
  int num_nodes_ = 1;
};

struct InitOptions {
  Device device = Device::cpu();  // CUDA: one GPU per rank by local rank
  // auto: nccl for CUDA with >1 rank when every rank has a GPU of its own (NCCL refuses two
  // ranks on one GPU), else mpi under a launcher (CUDA tensors staged through pinned host
  // memory), else local. Under auto the environment variable ZDL_DIST_BACKEND, when set, names
  // the backend instead.
  // "local": size 1 always; "mpi": MPI even without a launcher (a singleton of size 1);
  // "nccl": CUDA build only (without a launcher: one rank, no MPI); an error if ranks share a GPU.
  std::string backend = "auto";
  // Ranks on one host share its cores: unless OMP_NUM_THREADS is set, init() gives each of the
  // host's L ranks omp_get_num_procs() / L OpenMP threads (at least 1), so N ranks on a box do
  // not each start a thread per core. false: leave the thread count alone.
  bool share_cores = true;
  // Ranks per node: 0 takes the hosts the launcher placed the ranks on (ranks sharing memory
  // form a node); k > 0 poses the job as nodes of k consecutive ranks (set_ranks_per_node), so
  // one machine can try a multi-node layout. The environment variable ZDL_RANKS_PER_NODE, when
  // set, overrides 0.
  int ranks_per_node = 0;
};

// The OpenMP threads init() gives each rank when it shares the cores: num_procs / local_size.
int threads_per_rank(const Communicator& comm);

// Checks the environment variables init() and every communicator read (ZDL_DIST_BACKEND,
// ZDL_RANKS_PER_NODE, ZDL_COLLECTIVE_TIMEOUT_S): throws naming the variable and its bad value, so
// a program can refuse them as bad input before it starts anything.
void check_environment();

// Initializes the process group: under mpirun (MPICH's or OpenMPI's) an MPI (or NCCL)
// communicator over all ranks; without a launcher a LocalCommunicator of size 1. MPI is
// initialized once (thread level MULTIPLE) and finalized at exit.
std::shared_ptr<Communicator> init(const InitOptions& options = {});

// True when this process was started by an MPI launcher (PMI/PMIx/OpenMPI environment).
bool launched_by_mpi();

// An error every rank of the job raises at the same point with the same message (the ranks
// agreed on it, e.g. a checkpoint that some rank could not write or read): one rank prints it
// and every rank returns normally; no rank is left in a collective, so no abort is needed.
class CollectiveError : public Error {
 public:
  using Error::Error;
};

// Ends the whole job: MPI_Abort(MPI_COMM_WORLD, code) when MPI is running (every rank exits,
// including ranks blocked in a collective), else std::_Exit(code). For top-level error handling
// after a watchdog error (see [Note: watchdog]); in the library only the NCCL watchdog thread
// calls it (dist/comm/nccl_communicator.cpp), having nothing to throw to.
//   try { train(); } catch (const zdl::Error& e) { std::cerr << e.what() << "\n"; dist::abort_job(1); }
[[noreturn]] void abort_job(int code);

}  // namespace zdl::dist

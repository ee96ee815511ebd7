// Communicator basics shared by the backends (timeout, checks, error prefix) and init(), which
// picks the backend: LocalCommunicator without a launcher, MPI under mpirun, NCCL over MPI for
// CUDA devices in the CUDA build.
#include "dist/comm/communicator.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "core/hash.h"
#include "dist/comm/local_communicator.h"
#include "dist/comm/mpi_communicator.h"
#ifdef ZDL_WITH_NCCL
#include "dist/comm/nccl_communicator.h"
#endif

extern char** environ;

namespace zdl::dist {

namespace {

std::chrono::milliseconds default_timeout() {
  const char* env = std::getenv("ZDL_COLLECTIVE_TIMEOUT_S");
  if (env == nullptr || *env == '\0') return std::chrono::milliseconds(300'000);
  char* end = nullptr;
  double s = std::strtod(env, &end);
  ZDL_CHECK(end != env && *end == '\0' && s > 0, "ZDL_COLLECTIVE_TIMEOUT_S='", env,
            "' is not a positive number of seconds (e.g. 300 or 0.5)");
  const double max_s = std::chrono::duration<double>(Communicator::kMaxTimeout).count();
  return std::chrono::milliseconds(std::max<int64_t>(1, static_cast<int64_t>(std::min(s, max_s) * 1000.0 + 0.5)));
}

}  // namespace

Communicator::Communicator(Device device) : device_(device), timeout_(default_timeout()) {}

std::string Communicator::prefix() const {
  return "[rank " + std::to_string(rank()) + "/" + std::to_string(size()) + "]";
}

std::vector<int> Communicator::nodes() const {
  return nodes_.empty() ? std::vector<int>(static_cast<size_t>(size()), 0) : nodes_;
}

int Communicator::num_nodes() const { return num_nodes_; }

void Communicator::set_nodes(const std::vector<int64_t>& ids) {
  ZDL_CHECK(static_cast<int>(ids.size()) == size(), prefix(), " set_nodes: ", ids.size(), " ids for ", size(), " ranks");
  std::vector<int64_t> seen;
  nodes_.clear();
  for (int64_t id : ids) {
    auto it = std::find(seen.begin(), seen.end(), id);
    if (it == seen.end()) it = seen.insert(seen.end(), id);
    nodes_.push_back(static_cast<int>(it - seen.begin()));
  }
  num_nodes_ = static_cast<int>(seen.size());
}

void Communicator::set_ranks_per_node(int k) {
  ZDL_CHECK(k >= 1 && size() % k == 0, prefix(), " ranks per node must divide the ", size(), " ranks, got ", k);
  std::vector<int64_t> ids;
  for (int r = 0; r < size(); ++r) ids.push_back(r / k);
  set_nodes(ids);
}

void Communicator::find_nodes() { set_nodes(all_gather_i64(host_key())); }

std::shared_ptr<Communicator> Communicator::split(int color, int key) {
  ZDL_CHECK(color >= 0, prefix(), " split: color must be >= 0, got ", color);
  const int my_node = node();
  std::shared_ptr<Communicator> c = split_impl(color, key);
  c->set_timeout(timeout(), timeout_set_by());
  c->set_nodes(c->all_gather_i64(my_node));
  return c;
}

void Communicator::record(CollectiveKind kind, int64_t payload_bytes, bool is_root) const {
  record_collective(kind, payload_bytes, size(), is_root, spans_nodes());
}

void Communicator::check_collective(const char* op, const Tensor& a, const Tensor& b, int64_t a_blocks,
                                    int64_t b_blocks) const {
  const std::string p = prefix();
  ZDL_CHECK(a.defined() && b.defined(), p, " ", op, ": undefined tensor");
  for (const Tensor* t : {&a, &b}) {
    const char* which = t == &a ? "input" : "output";
    ZDL_CHECK(t->is_contiguous(), p, " ", op, ": ", which, " must be contiguous, got shape=", shape_str(t->shape()),
              " strides=", shape_str(t->strides()), " (call contiguous_copy())");
    ZDL_CHECK(accepts_device(t->device()), p, " ", op, ": ", which, " is on ", t->device().str(), " but the ",
              backend(), " communicator serves ", device().str());
  }
  ZDL_CHECK(a.dtype() == b.dtype(), p, " ", op, ": input dtype ", dtype_name(a.dtype()), " != output dtype ",
            dtype_name(b.dtype()));
  ZDL_CHECK(a.device() == b.device(), p, " ", op, ": input on ", a.device().str(), " != output on ",
            b.device().str());
  // a holds a_blocks blocks, b holds b_blocks blocks of the same size.
  ZDL_CHECK(a.numel() * b_blocks == b.numel() * a_blocks, p, " ", op, ": input has ", a.numel(),
            " elements, output has ", b.numel(), " elements; expected input = ", a_blocks, " block(s) and output = ",
            b_blocks, " block(s) of one size (N=", size(), "), input shape=", shape_str(a.shape()),
            " output shape=", shape_str(b.shape()));
  ZDL_CHECK(a.numel() % a_blocks == 0, p, " ", op, ": input has ", a.numel(), " elements, not a multiple of ",
            a_blocks, " blocks (pad the buffer to a multiple of N=", size(), ")");
}

bool launched_by_mpi() {
  for (const char* v : {"PMI_RANK", "PMI_SIZE", "PMIX_RANK", "PMI_FD", "OMPI_COMM_WORLD_SIZE",
                        "OMPI_COMM_WORLD_RANK", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "HYDRA_CONTROL_FD"}) {
    const char* e = std::getenv(v);
    if (e != nullptr && *e != '\0') return true;
  }
  // What MPICH's Hydra (HYDI_*) and PMIx launchers set in the processes they start. Not HYDRA_*
  // in general: HYDRA_LAUNCHER, HYDRA_HOST_FILE and the like configure mpiexec itself and are
  // often exported in a shell profile, where a plain process would take them for a launcher.
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view kv(*e);
    if (kv.starts_with("HYDI_") || kv.starts_with("PMIX_")) return true;
  }
  return false;
}

namespace {

// The backend asked for: options.backend, or under "auto" the ZDL_DIST_BACKEND environment
// variable when set (so a launcher script can choose without a flag).
std::string requested_backend(const InitOptions& options) {
  if (options.backend != "auto") return options.backend;
  const char* env = std::getenv("ZDL_DIST_BACKEND");
  return env != nullptr && *env != '\0' ? std::string(env) : "auto";
}

#ifdef ZDL_WITH_NCCL
// [Note: NCCL or MPI staging] NCCL needs one GPU per rank: two ranks on one GPU make
// ncclCommInitRank fail ("duplicate GPU"). Rank r takes GPU local_rank % count
// (select_cuda_device), so the GPUs are distinct exactly when every rank's local rank is below
// its host's device count. Collective (one all_gather_i64 over the MPI communicator).
struct GpuSharing {
  bool shared = false;
  int64_t ranks_sharing = 0;  // ranks whose local rank is at or past their host's GPU count
};
GpuSharing gpu_sharing(Communicator& mpi) {
  const int count = cuda_device_count();
  const std::vector<int64_t> over = mpi.all_gather_i64(mpi.local_rank() >= count ? 1 : 0);
  GpuSharing g;
  for (int64_t o : over) g.ranks_sharing += o;
  g.shared = g.ranks_sharing > 0;
  return g;
}
#endif

}  // namespace

void Communicator::check_same_on_every_rank(const std::string& mine, const std::string& what) {
  if (size() == 1) return;
  const std::vector<int64_t> all = all_gather_i64(static_cast<int64_t>(fnv1a64(mine)));
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    const std::string first = broadcast_string(mine, 0), other = broadcast_string(mine, static_cast<int>(r));
    throw Error(detail::str(prefix(), " ranks were given different ", what, ": rank 0 has {", first, "}, rank ", r,
                            " has {", other, "}; every rank must pass the same"));
  }
}

std::string Communicator::broadcast_string(const std::string& s, int root) {
  ZDL_CHECK(root >= 0 && root < size(), prefix(), " broadcast_string: root ", root, " is not a rank of ", size());
  const int64_t n = all_gather_i64(static_cast<int64_t>(s.size()))[static_cast<size_t>(root)];
  std::string out(static_cast<size_t>(n), '\0');
  for (int64_t at = 0; at < n; at += 8) {
    uint64_t word = 0;
    if (rank() == root) std::memcpy(&word, s.data() + at, static_cast<size_t>(std::min<int64_t>(8, n - at)));
    word = static_cast<uint64_t>(all_gather_i64(static_cast<int64_t>(word))[static_cast<size_t>(root)]);
    std::memcpy(out.data() + at, &word, static_cast<size_t>(std::min<int64_t>(8, n - at)));
  }
  return out;
}

int threads_per_rank(const Communicator& comm) { return std::max(1, omp_get_num_procs() / std::max(1, comm.local_size())); }

namespace {
// [Note: threads per rank] OpenMP starts one thread per core in every process; four ranks on a
// 2-core box would then run 8 busy threads on 2 cores, each waiting on the others. A user who set
// OMP_NUM_THREADS chose for themselves.
std::shared_ptr<Communicator> with_core_share(std::shared_ptr<Communicator> comm, const InitOptions& o) {
  if (o.share_cores && comm->local_size() > 1 && std::getenv("OMP_NUM_THREADS") == nullptr)
    omp_set_num_threads(threads_per_rank(*comm));
  return comm;
}
}  // namespace

static std::shared_ptr<Communicator> init_backend(const InitOptions& options);

namespace {
// [Note: nodes] Which ranks share a node decides which bytes are inter-node (the ledger) and what
// a layout such as hybrid sharding keeps on the fast link. A 0 from the caller defers to
// ZDL_RANKS_PER_NODE, then to the launcher's placement.
int requested_ranks_per_node(const InitOptions& o) {
  if (o.ranks_per_node != 0) return o.ranks_per_node;
  const char* env = std::getenv("ZDL_RANKS_PER_NODE");
  if (env == nullptr || *env == '\0') return 0;
  char* end = nullptr;
  const long k = std::strtol(env, &end, 10);
  ZDL_CHECK(end != env && *end == '\0' && k > 0 && k < (1 << 20), "ZDL_RANKS_PER_NODE='", env,
            "' is not a positive number of ranks");
  return static_cast<int>(k);
}
}  // namespace

std::shared_ptr<Communicator> init(const InitOptions& options) {
  ZDL_CHECK(options.ranks_per_node >= 0, "dist::init: ranks_per_node must be >= 0 (0: as launched), got ",
            options.ranks_per_node);
  const int k = requested_ranks_per_node(options);
  std::shared_ptr<Communicator> comm = with_core_share(init_backend(options), options);
  if (k > 0) comm->set_ranks_per_node(k);
  else if (comm->size() > 1) comm->find_nodes();
  return comm;
}

namespace {
void check_backend_name(const std::string& b, const InitOptions& options) {
  ZDL_CHECK(b == "auto" || b == "local" || b == "mpi" || b == "nccl", "dist::init: unknown backend '", b, "'",
            options.backend == "auto" ? " (from ZDL_DIST_BACKEND)" : "", " (use auto, local, mpi or nccl)");
}
}  // namespace

void check_environment() {
  const InitOptions defaults;
  check_backend_name(requested_backend(defaults), defaults);
  requested_ranks_per_node(defaults);
  default_timeout();
}

// The communicator init() returns, before the core share.
static std::shared_ptr<Communicator> init_backend(const InitOptions& options) {
  const std::string b = requested_backend(options);
  check_backend_name(b, options);
  const Device dev = options.device;
  if (dev.is_cuda()) {
    ZDL_CHECK(cuda_available(), "dist::init: device ", dev.str(),
              " requested but no CUDA device is visible (or this build has no CUDA support)");
  }
  const bool launched = launched_by_mpi();
  if (b == "local" || (b == "auto" && !launched)) return std::make_shared<LocalCommunicator>(dev);
  if (b == "nccl") {
#ifdef ZDL_WITH_NCCL
    ZDL_CHECK(dev.is_cuda(), "dist::init: backend nccl needs a CUDA device, got ", dev.str());
    // Without a launcher the NCCL communicator has one rank and needs no MPI.
    std::shared_ptr<Communicator> host;
    if (launched) host = std::make_shared<MpiCommunicator>(dev);
    else host = std::make_shared<LocalCommunicator>(dev);
    if (host->size() > 1) {
      const GpuSharing g = gpu_sharing(*host);
      ZDL_CHECK(!g.shared, host->prefix(), " dist::init: backend nccl needs one GPU per rank, but ", g.ranks_sharing,
                " of ", host->size(), " ranks share a GPU with another rank (", cuda_device_count(),
                " visible on this host); NCCL refuses that: use backend mpi (CUDA tensors staged through host "
                "memory), or start at most one rank per GPU");
    }
    return std::make_shared<NcclCommunicator>(std::move(host));
#else
    throw Error("dist::init: backend nccl requested but this zerodl build has no NCCL (configure with "
                "-DZDL_CUDA=ON where NCCL is installed, or set NCCL_ROOT; backend mpi works without it)");
#endif
  }
  auto mpi = std::make_shared<MpiCommunicator>(dev);
#ifdef ZDL_WITH_NCCL
  // auto: NCCL for CUDA tensors when every rank has a GPU of its own (the MPI communicator
  // bootstraps it and carries its host-side helpers), one launched rank too: MPI would stage
  // each of its collectives through host memory (GPT-2 124M on one H100: 204 ms a step at
  // stage 0, 579-653 ms at stages 1-3, against 52-54 ms on NCCL). Ranks sharing a GPU stay
  // on MPI with pinned host staging ([Note: NCCL or MPI staging]).
  if (b == "auto" && dev.is_cuda() && !gpu_sharing(*mpi).shared) return std::make_shared<NcclCommunicator>(mpi);
#endif
  return mpi;
}

}  // namespace zdl::dist

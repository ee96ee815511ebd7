// cuDNN fused attention through the frontend's graph API (see cudnn_attention.h).
//
// [Note: cuDNN SDPA graphs] A forward graph is Q, K, V -> sdpa -> O, Stats, with the causal
// mask as a diagonal band (top-left aligned, right bound 0: key j <= query i), the scale
// 1/sqrt(HS) as a value, bf16 I/O and f32 intermediates and compute; Stats is [B, NH, T, 1] f32.
// The backward graph is Q, K, V, O, dO, Stats -> sdpa_backward -> dQ, dK, dV with the same mask
// and scale and the deterministic algorithm. Building one (validate, lower to cuDNN, heuristics
// mode A, support check, plan) takes milliseconds to seconds (some engines compile at runtime),
// so graphs are cached per thread and device by everything they depend on: the pass, dtype,
// sizes and the stride sets of q, k, v, out (and dout) and dq/dk/dv. A refusal is
// cached too, so a refused shape costs one attempt and one message.
//
// Compiled by the host C++ compiler (the frontend is header-only C++17 and needs no device
// code); this file includes no zerodl header that brings nlohmann_json, since the frontend
// carries its own copy.
#include "kernels/cuda/cudnn_attention.h"

#include <cudnn_frontend.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/check.h"
#include "core/cuda_check.h"
#include "kernels/cuda/stream.h"
#include "kernels/cuda/thread_device_context.h"

namespace zdl::kernels::cuda {

namespace {

namespace fe = cudnn_frontend;
using Graph = fe::graph::Graph;
using TensorAttr = fe::graph::Tensor_attributes;

// A safety valve, not a working limit: training uses a few shapes (batch, last batch, eval).
constexpr size_t kMaxGraphs = 64;

// uids of the graphs' tensors: the variant pack's keys.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kdO, kdQ, kdK, kdV };

std::atomic<int64_t> g_built{0}, g_refused{0}, g_forward_runs{0}, g_backward_runs{0};

// Prints `message` to stderr the first time this process sees it (any thread).
void warn_once(const std::string& message) {
  static std::mutex mutex;
  static std::set<std::string> printed;
  std::lock_guard<std::mutex> lock(mutex);
  if (!printed.insert(message).second) return;
  std::fprintf(stderr, "zdl: %s\n", message.c_str());
  std::fflush(stderr);
}

const char* pass_name(SdpaPass pass) { return pass == SdpaPass::Forward ? "forward" : "backward"; }

using Strides = std::array<int64_t, 4>;

// s, or contiguous [B, NH, T, HS] strides when s is all zero.
Strides or_dense(const Strides& s, const SdpaProblem& p) {
  if (s != Strides{}) return s;
  return {p.nh * p.t * p.hs, p.t * p.hs, p.hs, 1};
}

std::string describe(const SdpaProblem& p, SdpaPass pass) {
  auto strides = [&](const Strides& s) {
    const Strides r = or_dense(s, p);
    return shape_str({r[0], r[1], r[2], r[3]});
  };
  std::string out = detail::str("causal attention ", pass_name(pass), " B=", p.b, " NH=", p.nh, " T=", p.t,
                                " HS=", p.hs, " ", dtype_name(p.dtype), ", strides q ", strides(p.q_stride), " k ",
                                strides(p.k_stride), " v ", strides(p.v_stride), " out ", strides(p.o_stride));
  if (pass == SdpaPass::Backward) out += detail::str(" dq/dk/dv ", strides(p.dqkv_stride));
  return out;
}

std::string frontend_error(const fe::error_t& e) {
  std::ostringstream os;
  os << e.code << ": " << e.err_msg;
  return os.str();
}

struct Key {
  SdpaPass pass;
  DType dtype;
  int64_t b, nh, t, hs;
  Strides q, k, v, o, dqkv;  // resolved (never all zero, except dqkv for the forward)

  Key(SdpaPass pass_, const SdpaProblem& p)
      : pass(pass_), dtype(p.dtype), b(p.b), nh(p.nh), t(p.t), hs(p.hs), q(or_dense(p.q_stride, p)),
        k(or_dense(p.k_stride, p)), v(or_dense(p.v_stride, p)), o(or_dense(p.o_stride, p)),
        // The forward writes no gradient: one forward graph whatever their layout.
        dqkv(pass_ == SdpaPass::Backward ? or_dense(p.dqkv_stride, p) : Strides{}) {}
  auto tie() const { return std::tie(pass, dtype, b, nh, t, hs, q, k, v, o, dqkv); }
  bool operator<(const Key& other) const { return tie() < other.tie(); }
};

// A built graph and its workspace, or a refusal (graph null).
struct Entry {
  std::shared_ptr<Graph> graph;
  size_t workspace = 0;
};

// The graph of `pass` for p, declared (not yet built). See [Note: cuDNN SDPA graphs].
std::shared_ptr<Graph> declare_graph(const SdpaProblem& p, SdpaPass pass) {
  const std::vector<int64_t> dims = {p.b, p.nh, p.t, p.hs};
  const std::vector<int64_t> stats_dims = {p.b, p.nh, p.t, 1}, stats_strides = {p.nh * p.t, p.t, 1, 1};
  const float scale = 1.0f / std::sqrt(static_cast<float>(p.hs));
  auto g = std::make_shared<Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto input = [&](const char* name, int64_t uid, const std::vector<int64_t>& strides) {
    return g->tensor(TensorAttr().set_name(name).set_uid(uid).set_dim(dims).set_stride(strides));
  };
  auto as_vector = [&](const Strides& s) {
    const Strides r = or_dense(s, p);
    return std::vector<int64_t>(r.begin(), r.end());
  };
  auto Q = input("Q", kQ, as_vector(p.q_stride));
  auto K = input("K", kK, as_vector(p.k_stride));
  auto V = input("V", kV, as_vector(p.v_stride));
  if (pass == SdpaPass::Forward) {
    auto options = fe::graph::SDPA_attributes()
                       .set_name("zdl_causal_attention")
                       .set_generate_stats(true)
                       .set_attn_scale(scale)
                       .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                       .set_diagonal_band_right_bound(0);
    auto [O, stats] = g->sdpa(Q, K, V, options);
    O->set_output(true).set_uid(kO).set_dim(dims).set_stride(as_vector(p.o_stride));
    stats->set_output(true)
        .set_uid(kStats)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim(stats_dims)
        .set_stride(stats_strides);
    return g;
  }
  auto O = input("O", kO, as_vector(p.o_stride));
  auto dO = input("dO", kdO, as_vector(p.o_stride));
  auto stats = g->tensor(TensorAttr()
                             .set_name("Stats")
                             .set_uid(kStats)
                             .set_data_type(fe::DataType_t::FLOAT)
                             .set_dim(stats_dims)
                             .set_stride(stats_strides));
  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("zdl_causal_attention_backward")
                     .set_attn_scale(scale)
                     .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                     .set_diagonal_band_right_bound(0)
                     .set_deterministic_algorithm(true);  // zerodl's runs repeat bit for bit
  auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, stats, options);
  dQ->set_output(true).set_uid(kdQ).set_dim(dims).set_stride(as_vector(p.dqkv_stride));
  dK->set_output(true).set_uid(kdK).set_dim(dims).set_stride(as_vector(p.dqkv_stride));
  dV->set_output(true).set_uid(kdV).set_dim(dims).set_stride(as_vector(p.dqkv_stride));
  return g;
}

// Builds the graph of (p, pass) into *entry; returns why not ("" on success). Never throws:
// anything the frontend or cuDNN reports makes the shape a refusal.
std::string build_graph(cudnnHandle_t handle, const SdpaProblem& p, SdpaPass pass, Entry* entry) {
  if (p.dtype != DType::BF16) return detail::str("dtype ", dtype_name(p.dtype), " (the cuDNN path is bf16)");
  try {
    std::shared_ptr<Graph> g = declare_graph(p, pass);
    std::string why;
    auto step = [&](const char* what, const fe::error_t& e) {
      if (why.empty() && e.is_bad()) why = detail::str(what, ": ", frontend_error(e));
      return why.empty();
    };
    // Each step runs only while the ones before it succeeded.
    if (step("validate", g->validate()) && step("build_operation_graph", g->build_operation_graph(handle)) &&
        step("create_execution_plans", g->create_execution_plans({fe::HeurMode_t::A})) &&
        step("check_support", g->check_support(handle)) && step("build_plans", g->build_plans(handle))) {
      int64_t bytes = 0;
      if (step("get_workspace_size", g->get_workspace_size(bytes))) {
        entry->graph = std::move(g);
        entry->workspace = static_cast<size_t>(bytes);
      }
    }
    return why;
  } catch (const std::exception& e) {
    return detail::str("exception: ", e.what());
  } catch (...) {
    return "unknown exception";
  }
}

// One per (host thread, device): the cuDNN handle and the graphs built with it.
class CudnnContext {
 public:
  explicit CudnnContext(int device) : device_(device) {
    const cudnnStatus_t st = cudnnCreate(&handle_);
    if (st != CUDNN_STATUS_SUCCESS) {
      handle_ = nullptr;
      warn_once(detail::str("cuDNN attention: cudnnCreate on cuda:", device, " failed (", cudnnGetErrorString(st),
                            "): attention runs on zerodl's kernels"));
    }
  }
  CudnnContext(const CudnnContext&) = delete;
  CudnnContext& operator=(const CudnnContext&) = delete;
  ~CudnnContext() {
    graphs_.clear();  // before the handle they were built with
    if (handle_) (void)cudnnDestroy(handle_);  // may run at thread exit: nothing to report to
  }

  std::optional<size_t> plan(const SdpaProblem& p, SdpaPass pass, SdpaCaller caller) {
    if (!handle_) return std::nullopt;
    const Key key(pass, p);
    auto it = graphs_.find(key);
    if (it == graphs_.end()) {
      if (caller == SdpaCaller::Inference) {
        if (pass != SdpaPass::Forward) return std::nullopt;
        if (inference_shapes_ >= kCudnnInferenceShapes) {
          warn_once(detail::str("cuDNN attention: ", kCudnnInferenceShapes, " shapes built on cuda:", device_,
                                " for calls without gradients; further new ones run on zerodl's kernels"));
          return std::nullopt;
        }
        ++inference_shapes_;
      }
      if (graphs_.size() >= kMaxGraphs) {
        warn_once(detail::str("cuDNN attention: ", kMaxGraphs, " shapes cached on cuda:", device_,
                              " for one thread; further shapes run on zerodl's kernels"));
        return std::nullopt;
      }
      Entry entry;
      const std::string why = build_graph(handle_, p, pass, &entry);
      if (why.empty()) {
        g_built.fetch_add(1, std::memory_order_relaxed);
      } else {
        g_refused.fetch_add(1, std::memory_order_relaxed);
        warn_once(
            detail::str("cuDNN refused ", describe(p, pass), " (", why, "); this shape runs on zerodl's kernels"));
      }
      it = graphs_.emplace(key, std::move(entry)).first;
    }
    if (!it->second.graph) return std::nullopt;
    return it->second.workspace;
  }

  // Runs the built graph of (p, pass) on the compute stream.
  void execute(const SdpaProblem& p, SdpaPass pass, std::unordered_map<int64_t, void*>& pack, void* workspace,
               const char* what) {
    const Key key(pass, p);
    auto it = graphs_.find(key);
    ZDL_CHECK(handle_ && it != graphs_.end() && it->second.graph, what, ": no cuDNN graph was built for ",
              describe(p, pass), " on this thread (cudnn_attention_plan decides first)");
    const cudnnStatus_t st = cudnnSetStream(handle_, compute_stream());
    ZDL_CHECK(st == CUDNN_STATUS_SUCCESS, what, ": cudnnSetStream failed: ", cudnnGetErrorString(st));
    const fe::error_t e = it->second.graph->execute(handle_, pack, workspace);
    ZDL_CHECK(e.is_good(), what, ": cuDNN graph execute failed for ", describe(p, pass), ": ", frontend_error(e));
  }

 private:
  int device_;
  int inference_shapes_ = 0;  // graphs built (or refused) for calls without gradients
  cudnnHandle_t handle_ = nullptr;
  std::map<Key, Entry> graphs_;
};

CudnnContext& context() { return thread_device_context<CudnnContext>(); }

}  // namespace

bool cudnn_attention_enabled() {
  const char* v = std::getenv("ZDL_CUDNN_ATTENTION");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

std::optional<size_t> cudnn_attention_plan(const SdpaProblem& p, SdpaPass pass, SdpaCaller caller) {
  ZDL_CHECK(p.b > 0 && p.nh > 0 && p.t > 0 && p.hs > 0, "cudnn_attention_plan: empty problem ", describe(p, pass));
  return context().plan(p, pass, caller);
}

void cudnn_attention_forward(const SdpaProblem& p, const void* q, const void* k, const void* v, void* out,
                             float* stats, void* workspace) {
  // The variant pack takes non-const pointers; cuDNN only reads the inputs.
  std::unordered_map<int64_t, void*> pack = {{kQ, const_cast<void*>(q)}, {kK, const_cast<void*>(k)},
                                             {kV, const_cast<void*>(v)}, {kO, out},
                                             {kStats, stats}};
  context().execute(p, SdpaPass::Forward, pack, workspace, "cudnn_attention_forward");
  g_forward_runs.fetch_add(1, std::memory_order_relaxed);
}

void cudnn_attention_backward(const SdpaProblem& p, const void* q, const void* k, const void* v, const void* out,
                              const void* dout, const float* stats, void* dq, void* dk, void* dv, void* workspace) {
  std::unordered_map<int64_t, void*> pack = {
      {kQ, const_cast<void*>(q)},     {kK, const_cast<void*>(k)},      {kV, const_cast<void*>(v)},
      {kO, const_cast<void*>(out)},   {kdO, const_cast<void*>(dout)},  {kStats, const_cast<float*>(stats)},
      {kdQ, dq},                      {kdK, dk},                       {kdV, dv}};
  context().execute(p, SdpaPass::Backward, pack, workspace, "cudnn_attention_backward");
  g_backward_runs.fetch_add(1, std::memory_order_relaxed);
}

CudnnAttentionCounters cudnn_attention_counters() {
  return {g_built.load(std::memory_order_relaxed), g_refused.load(std::memory_order_relaxed),
          g_forward_runs.load(std::memory_order_relaxed), g_backward_runs.load(std::memory_order_relaxed)};
}

}  // namespace zdl::kernels::cuda

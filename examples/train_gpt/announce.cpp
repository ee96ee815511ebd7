#include "examples/train_gpt/announce.h"

#include <linux/magic.h>
#include <sys/vfs.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "core/memory.h"
#include "io/gpt2_format.h"

namespace zdl::train_gpt {

using json = nlohmann::json;

namespace {

// tmpfs and ramfs keep their files in memory: states offloaded there free none of it.
bool on_memory_filesystem(const std::string& dir) {
  struct statfs fs {};
  return ::statfs(dir.c_str(), &fs) == 0 && (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC);
}

// How the ranks' scratch files move their bytes: a rank's filesystem may refuse direct I/O where
// another's takes it (node-local disks). Collective: every rank announces.
std::string offload_io_of_all_ranks(const Session& x) {
  const dist::NvmeStore* nvme = x.zero.nvme_store();
  if (!nvme) return "";
  dist::CommPhaseScope phase(dist::CommPhase::Metrics);
  const int n = x.comm.size();
  const int direct = static_cast<int>(x.comm.all_reduce_sum(nvme->direct() ? 1.0 : 0.0));
  if (direct == n) return "direct I/O";
  if (!x.s.offload.direct_io) return "through the page cache";
  if (direct == 0) return "through the page cache: the filesystem refuses direct I/O";
  return detail::str("direct I/O on ", direct, " of ", n, " ranks; the others through the page cache: ",
                     "their filesystems refuse direct I/O");
}

// The console's lines, rank 0 alone.
void print_run(const Session& x, const DeviceInfo& gpu, int64_t first_step, const std::string& offload_io) {
  const Args& a = x.a;
  const Setup& s = x.s;
  auto say = [&](const std::string& m) {
    if (x.lead()) std::printf("%s\n", m.c_str());
  };
  say(detail::str("zerodl train_gpt: ", x.model.extra_repr()));
  if (x.dev.is_cuda())
    say(detail::str("device ", x.dev.str(), " on rank 0 (", gpu.name, ", ", format_bytes(gpu.total_bytes), ", peak bf16 ",
                    gpu.peak_bf16_tflops > 0 ? detail::str(gpu.peak_bf16_tflops, " TFLOP/s") : std::string("unknown: no MFU"),
                    ") | rank r on GPU local_rank % ", cuda_device_count(), " | collectives ",
                    x.comm.backend() == "nccl" ? "NCCL" : x.comm.size() > 1 ? "MPI, staged through host memory" : "local"));
  say(detail::str("params ", x.model.num_parameters(), " | ranks ", x.comm.size(), " (", x.comm.backend(), ") | ",
                  dist::stage_name(x.zero.stage()), " | ", dtype_name(s.dtype), " | data ", s.data_path, " (",
                  s.ds->num_tokens(), " tokens, ", data::format_name(s.ds->files().format()),
                  s.ds->files().files().size() > 1 ? detail::str(", ", s.ds->files().files().size(), " files") : "",
                  ") | batch ", a.batch, " x ", a.seq, " x accum ", a.grad_accum,
                  " | steps ", a.steps));
  for (const std::string& flag : s.resumed_with_other)
    say("resumed with " + flag + ": the run leaves the checkpoint's trajectory");
  if (s.resumed && first_step >= a.steps)
    say(detail::str("nothing to train: the checkpoint is at step ", first_step, ", the run's last (--steps ", a.steps, ")"));
  if (x.zero.options().quantize_weights)
    say("qwZ: ZeRO-3's gathers move int8 codes (a scale per 256 values): the losses differ from the exact run's");
  if (x.zero.options().quantize_grads)
    say("qgZ: the gradient reduce-scatter moves int8 codes in two hops (within nodes, then across): the losses "
        "differ from the exact run's");
  if (x.comm.spans_nodes() || x.zero.replicas() != nullptr) {
    const int K = x.zero.shard_group().size();
    say(detail::str("layout: ", x.comm.size(), " ranks on ", x.comm.num_nodes(), " node(s) | states sharded over ", K,
                    " rank(s)", x.zero.replicas() != nullptr
                                    ? detail::str(" and replicated over ", x.comm.size() / K, " groups (hybrid sharding)")
                                    : std::string(""),
                    " | collectives within a group ", x.zero.shard_group().spans_nodes() ? "cross nodes" : "stay on a node",
                    x.zero.options().secondary_partition ? " | hpZ: the backward's gathers within a node" : ""));
  }
  if (s.tok) say(detail::str("tokenizer ", s.tok->source(), " (", s.tok->vocab_size(), " tokens)"));
  if (const dist::NvmeStore* nvme = x.zero.nvme_store()) {
    const MemoryStats off = memory_ledger().offloaded();
    say(detail::str("offload: optimizer ", dist::offload_target_name(s.offload.optimizer), ", params ",
                    dist::offload_target_name(s.offload.params), " | rank 0 keeps ", format_bytes(off.total_current),
                    " of model states in ", std::filesystem::absolute(nvme->dir()).string(), " (optimizer states ",
                    format_bytes(off.current_of(MemoryCategory::OptimizerState)), ", parameter shards ",
                    format_bytes(off.current_of(MemoryCategory::ParameterShard)), "; ", offload_io, ")"));
    if (on_memory_filesystem(nvme->dir()))
      say(detail::str("offload: warning: ", nvme->dir(), " is on a memory filesystem (tmpfs): the offloaded states stay ",
                      "in this machine's memory; name a directory on a disk to free it"));
    if (const dist::OptimizerWindow* w = x.zero.optimizer_window())
      say(w->units() == 0
              ? detail::str("offload window ", format_bytes(s.offload.window_bytes), ": holds no unit on rank 0 (the ",
                            "first unit's optimizer states take ", format_bytes(w->first_unit_bytes()),
                            "): every state moves in the optimizer step")
              : detail::str("offload window ", format_bytes(s.offload.window_bytes),
                            ": rank 0 moves the optimizer states of ", w->units(), " of ", x.zero.units().size(),
                            " units (", format_bytes(w->bytes()),
                            ") outside the step: read under the backward, written under the next forward"));
  }
  if (x.zero.policy().optimizer_on_host) {
    const MemoryStats host = memory_ledger().stats(Device::cpu());
    say(detail::str("offload: optimizer cpu | rank 0 keeps its masters and Adam moments in host memory (",
                    format_bytes(host.current_of(MemoryCategory::OptimizerState)),
                    ") and the CPU updates them; gradients go down and parameters up beside the GPU's compute"));
  } else if (s.offload.optimizer == dist::OffloadTarget::Cpu) {
    say("offload: optimizer cpu on CPU ranks: the states already live in host memory (the same as none)");
  }
  if (s.resumed) say(detail::str("resumed from ", a.resume, " at step ", first_step));
}

}  // namespace

void announce(const Session& x, const DeviceInfo& gpu, int64_t first_step) {
  print_run(x, gpu, first_step, offload_io_of_all_ranks(x));
  const Args& a = x.a;
  const Setup& s = x.s;
  s.metrics->write({{"type", "config"},
                    {"params", x.model.num_parameters()},
                    {"params_padded", x.zero.num_padded()},
                    {"model", json::parse(io::gpt_config_to_json(s.cfg))},
                    {"data", s.data_path},
                    {"data_format", data::format_name(s.ds->files().format())},
                    {"data_files", s.ds->files().files().size()},
                    {"world_size", x.comm.size()},
                    {"rank", x.comm.rank()},
                    {"zero_stage", a.zero_stage},
                    {"shard_group", x.zero.shard_group().size()},
                    {"secondary_partition", x.zero.options().secondary_partition},
                    {"quantize_weights", a.quantize_weights},
                    {"quantize_grads", a.quantize_grads},
                    {"nodes", x.comm.num_nodes()},
                    {"dtype", dtype_name(s.dtype)},
                    {"offload_optimizer", dist::offload_target_name(s.offload.optimizer)},
                    {"offload_params", dist::offload_target_name(s.offload.params)},
                    {"offload_dir", s.offload.dir},
                    {"offloaded_bytes", memory_ledger().offloaded().total_current},
                    {"offload_io", a.offload_io},  // asked for; offload_direct_io: in effect on this rank
                    {"offload_direct_io", x.zero.nvme_store() != nullptr && x.zero.nvme_store()->direct()},
                    {"offload_window_bytes", s.offload.window_bytes},
                    {"device", x.dev.str()},
                    {"gpu", x.dev.is_cuda() ? gpu.name : ""},
                    {"peak_tflops", gpu.peak_bf16_tflops},
                    {"backend", x.comm.backend()},
                    {"steps", a.steps},
                    {"batch", a.batch},
                    {"seq", a.seq},
                    {"grad_accum", a.grad_accum},
                    {"lr", a.lr},
                    {"warmup", a.warmup},
                    {"seed", a.seed},
                    {"start_step", first_step}});
}

}  // namespace zdl::train_gpt

// Offload test cases (docs/offload.md), written once for any world size: test_dist at N = 1,
// test_dist_mpi at N = 2, 4. Offload moves bytes, never arithmetic: every run here is compared
// with the same run without offload bit for bit.
#pragma once
#include <filesystem>
#include <map>
#include <string>
#include <utility>

#include "sharded_checkpoint_cases.h"
#include "zero_cases.h"

namespace zdl::dist::testing {

// The scratch files go to the system's temp directory (each is unlinked as soon as it is made).
inline OffloadOptions nvme_offload(bool params) {
  return {.optimizer = OffloadTarget::Nvme,
          .params = params ? OffloadTarget::Nvme : OffloadTarget::None,
          .dir = std::filesystem::temp_directory_path().string()};
}

inline void expect_same_bits(Communicator& comm, const RunResult& got, const RunResult& ref, const std::string& what) {
  EXPECT_EQ(got.losses, ref.losses) << comm.prefix() << " " << what << ": losses differ from the run without offload";
  EXPECT_EQ(got.grad_norms, ref.grad_norms) << comm.prefix() << " " << what << ": gradients differ";
  ASSERT_EQ(got.params.size(), ref.params.size());
  for (auto& [name, v] : ref.params)
    EXPECT_TRUE(got.params.at(name) == v) << comm.prefix() << " " << what << ": parameter " << name << " differs by "
                                          << rel_l2(got.params.at(name), v) << " (relative L2)";
}

// Every stage, f32 and bf16, with and without gradient accumulation (8 rows a micro-step: N <= 8): optimizer offload (and
// under ZeRO-3 parameter offload too) gives the bits of the same run without it, and (f32, bf16)
// of one process.
inline void expect_offload_bit_identical(Communicator& comm) {
  for (ZeroStage stage : kAllStages)
    for (DType dt : {DType::F32, DType::BF16})
      for (int accum : {1, 2}) {
        RunConfig c{.stage = stage, .dtype = dt, .grad_accum = accum, .batch = 8, .dropout = 0.1};
        const RunResult ref = run_zero(comm, c);
        for (bool params : {false, true}) {
          if (params && stage != ZeroStage::Three) continue;
          c.offload = nvme_offload(params);
          const std::string what = detail::str(stage_name(stage), " ", dtype_name(dt), " accum ", accum,
                                               params ? " optimizer+params on nvme" : " optimizer on nvme");
          expect_same_bits(comm, run_zero(comm, c), ref, what);
        }
      }
  expect_identical(comm, {.stage = ZeroStage::Three, .batch = 8, .offload = nvme_offload(true)});
}

// ZeRO-3 in bf16 with both offloads: after placement no master, moment or parameter shard is in
// memory; the ledger's offload place holds exactly (4 + 4 + 4) x shard of optimizer states and
// 2 x shard of parameter shards per unit; a step brings in at most three units' states at once
// (one updating, one read ahead, one being written) and leaves none behind.
inline void expect_offloaded_states_leave_memory(Communicator& comm) {
  const MemoryStats mem0 = memory_ledger().stats(Device::cpu()), disk0 = memory_ledger().offloaded();
  auto grew = [](const MemoryStats& now, const MemoryStats& before, MemoryCategory k) {
    return now.current_of(k) - before.current_of(k);
  };
  RunConfig c{.stage = ZeroStage::Three, .dtype = DType::BF16, .offload = nvme_offload(true)};
  sharded::ZeroRun run(comm, c);
  int64_t shards = 0, largest = 0;
  for (const ParamUnit* u : run.zero->units()) {
    shards += u->shard_size();
    largest = std::max(largest, u->shard_size());
  }
  auto check_placed = [&](const char* when) {
    const MemoryStats mem = memory_ledger().stats(Device::cpu()), disk = memory_ledger().offloaded();
    EXPECT_EQ(grew(mem, mem0, MemoryCategory::OptimizerState), 0) << comm.prefix() << " " << when;
    EXPECT_EQ(grew(mem, mem0, MemoryCategory::ParameterShard), 0) << comm.prefix() << " " << when;
    EXPECT_EQ(grew(disk, disk0, MemoryCategory::OptimizerState), 12 * shards) << comm.prefix() << " " << when;
    EXPECT_EQ(grew(disk, disk0, MemoryCategory::ParameterShard), 2 * shards) << comm.prefix() << " " << when;
  };
  // The closed form says the same (docs/offload.md's table).
  const auto closed = offloaded_bytes_closed_form(c.stage, c.offload, run.zero->num_padded(), comm.size(),
                                                  ElementBytes::of(c.dtype));
  EXPECT_EQ(closed.at(MemoryCategory::OptimizerState), 12 * shards) << comm.prefix();
  EXPECT_EQ(closed.at(MemoryCategory::ParameterShard), 2 * shards) << comm.prefix();
  check_placed("after placement");
  memory_ledger().reset_peaks(Device::cpu());
  run.steps(0, 2);
  check_placed("after two steps");
  const int64_t peak = memory_ledger().stats(Device::cpu()).peak_of(MemoryCategory::OptimizerState) -
                       mem0.current_of(MemoryCategory::OptimizerState);
  EXPECT_GT(peak, 0) << comm.prefix() << " the step never brought its states in";
  EXPECT_LE(peak, 3 * 12 * largest) << comm.prefix() << " more than three units' optimizer states in memory";
  // A checkpoint load writes the states back unit by unit: none stays in memory for the next step.
  sharded::SharedDir tmp(comm);
  save_sharded(tmp / "ckpt", *run.zero, *run.opt, run.state(2));
  memory_ledger().reset_peaks(Device::cpu());
  load_sharded(tmp / "ckpt", *run.zero, *run.opt);
  check_placed("after loading a checkpoint");
  EXPECT_LE(memory_ledger().stats(Device::cpu()).peak_of(MemoryCategory::OptimizerState) -
                mem0.current_of(MemoryCategory::OptimizerState),
            2 * 12 * largest)
      << comm.prefix() << " a load held more than two units' optimizer states";
}

// What a step moves to and from the disk equals the closed form exactly: every stage, f32 and
// bf16, with and without accumulation (bytes counted by the store as it queues them).
inline void expect_offload_traffic_closed_form(Communicator& comm) {
  for (ZeroStage stage : kAllStages)
    for (DType dt : {DType::F32, DType::BF16})
      for (int accum : {1, 2}) {
        RunConfig c{.stage = stage, .dtype = dt, .grad_accum = accum, .batch = 8,
                    .offload = nvme_offload(stage == ZeroStage::Three)};
        std::vector<std::pair<int64_t, int64_t>> counters;  // (read, written) after each step
        int64_t padded = 0;
        Probe probe;
        probe.after_step = [&](ZeroPartitioner& z, int) {
          counters.emplace_back(z.nvme_store()->bytes_read(), z.nvme_store()->bytes_written());
          padded = z.num_padded();
        };
        run_zero(comm, c, probe);
        const OffloadTraffic want =
            offload_traffic_closed_form(stage, c.offload, padded, comm.size(), ElementBytes::of(dt), accum);
        ASSERT_EQ(counters.size(), 3u);
        for (size_t s = 1; s < counters.size(); ++s) {
          const std::string what = detail::str(comm.prefix(), " ", stage_name(stage), " ", dtype_name(dt), " accum ",
                                                accum, " step ", s + 1);
          EXPECT_EQ(counters[s].first - counters[s - 1].first, want.read) << what << ": bytes read";
          EXPECT_EQ(counters[s].second - counters[s - 1].second, want.written) << what << ": bytes written";
        }
      }
}

// The optimizer window (dist/offload/optimizer_window.h) moves I/O out of the step, never
// arithmetic: with a third and all of a rank's optimizer states as the window, every stage in
// f32 and bf16, with and without accumulation (ZeRO-3 with parameter offload too), gives the bits
// of the run without offload.
inline void expect_window_bit_identical(Communicator& comm) {
  for (ZeroStage stage : kAllStages)
    for (DType dt : {DType::F32, DType::BF16})
      for (int accum : {1, 2}) {
        RunConfig c{.stage = stage, .dtype = dt, .grad_accum = accum, .batch = 8, .dropout = 0.1};
        const RunResult ref = run_zero(comm, c);
        c.offload = nvme_offload(stage == ZeroStage::Three);
        const int64_t states = offloaded_bytes_closed_form(stage, c.offload, gpt_padded_units(tiny_gpt(), comm.size()).total(),
                                                           comm.size(), ElementBytes::of(dt))
                                   .at(MemoryCategory::OptimizerState);
        for (int64_t window : {states / 3, 2 * states}) {  // some units; every unit
          c.offload.window_bytes = window;
          expect_same_bits(comm, run_zero(comm, c), ref,
                           detail::str(stage_name(stage), " ", dtype_name(dt), " accum ", accum, " window ", window, " of ",
                                       states, " bytes of optimizer states"));
        }
      }
}

// What the window moves, checked exactly (ZeRO-3, bf16, optimizer offload, half the states as the
// window, two micro-steps): the window's bytes are read between the steps (under the backward) and
// the step reads only the rest; when the step ends, the window's states are still in memory (their
// writes run on into the next forward, whose first unit finishes them) and nothing else is; and
// the optimizer states in memory never exceed the three units the step holds plus the window.
inline void expect_window_moves_io_out_of_the_step(Communicator& comm) {
  RunConfig c{.stage = ZeroStage::Three, .dtype = DType::BF16, .grad_accum = 2, .batch = 8,
              .offload = nvme_offload(false)};
  const int64_t states = offloaded_bytes_closed_form(c.stage, c.offload, gpt_padded_units(tiny_gpt(), comm.size()).total(),
                                                     comm.size(), ElementBytes::of(c.dtype))
                             .at(MemoryCategory::OptimizerState);
  c.offload.window_bytes = states / 2;
  struct Mark {
    int64_t read = 0, written = 0, state_mem = 0;
  };
  std::vector<Mark> begins, ends;
  std::vector<int64_t> first_forward;  // optimizer states in memory when each micro-step's first unit's forward ends
  int64_t baseline = 0, largest = 0, padded = 0, window_bytes = 0;
  size_t window_units = 0;
  auto state_mem = [] { return memory_ledger().stats(Device::cpu()).current_of(MemoryCategory::OptimizerState); };
  Probe probe;
  probe.after_wrap = [&](ZeroPartitioner& z) {
    baseline = state_mem();
    for (const ParamUnit* u : z.units()) largest = std::max(largest, 12 * u->shard_size());
    memory_ledger().reset_peaks(Device::cpu());
    z.set_trace([&z, &begins, &ends, &first_forward, &state_mem, &baseline, first = true](const TraceEvent& e) mutable {
      if (e.kind == TraceKind::ForwardEnd && first) first_forward.push_back(state_mem() - baseline);
      if (e.kind == TraceKind::ForwardEnd || e.kind == TraceKind::BackwardEnd) first = e.kind == TraceKind::BackwardEnd;
      if (e.kind != TraceKind::StepBegin && e.kind != TraceKind::StepEnd) return;
      (e.kind == TraceKind::StepBegin ? begins : ends)
          .push_back({z.nvme_store()->bytes_read(), z.nvme_store()->bytes_written(), state_mem() - baseline});
    });
  };
  probe.after_step = [&](ZeroPartitioner& z, int) {
    padded = z.num_padded();
    const OptimizerWindow* window = z.optimizer_window();
    ASSERT_NE(window, nullptr) << comm.prefix();
    window_bytes = window->bytes();
    window_units = window->units();
  };
  run_zero(comm, c, probe);
  const int64_t peak = memory_ledger().stats(Device::cpu()).peak_of(MemoryCategory::OptimizerState) - baseline;
  const std::string at = comm.prefix() + " window " + std::to_string(c.offload.window_bytes) + " bytes";
  ASSERT_GT(window_units, 0u) << at << ": half the states hold no unit";
  EXPECT_LE(window_bytes, c.offload.window_bytes) << at;
  const OffloadTraffic per_step =
      offload_traffic_closed_form(c.stage, c.offload, padded, comm.size(), ElementBytes::of(c.dtype), c.grad_accum);
  ASSERT_EQ(begins.size(), static_cast<size_t>(c.steps)) << at;
  ASSERT_EQ(ends.size(), static_cast<size_t>(c.steps)) << at;
  for (size_t s = 0; s < begins.size(); ++s) {
    const int64_t read_before = begins[s].read - (s ? ends[s - 1].read : 0);  // placement reads nothing
    EXPECT_EQ(read_before, window_bytes) << at << ", step " << s << ": bytes read under the backward";
    EXPECT_EQ(ends[s].read - begins[s].read, per_step.read - window_bytes) << at << ", step " << s << ": bytes read in the step";
    // The window's writes are queued as the step ends, after its own: both counted by then.
    EXPECT_EQ(ends[s].written - begins[s].written, per_step.written) << at << ", step " << s << ": bytes written";
    EXPECT_EQ(ends[s].state_mem, window_bytes) << at << ", step " << s << ": optimizer states in memory at the step's end";
  }
  EXPECT_LE(peak, 3 * largest + c.offload.window_bytes) << at << ": the window held more than its budget";
  EXPECT_GT(peak, 0) << at;
  // The window leaves memory at the same point of every step, the end of its first unit's forward,
  // whatever the disk's speed (a capped run's peak must not depend on it): the first step's
  // first unit found nothing, and every later one must find nothing either.
  const size_t micro_steps = static_cast<size_t>(c.steps * c.grad_accum);
  ASSERT_EQ(first_forward.size(), micro_steps) << at;
  for (size_t m = 0; m < micro_steps; ++m)
    EXPECT_EQ(first_forward[m], 0) << at << ", micro-step " << m << ": optimizer states in memory after the first unit's forward";
  // A step skipped for a non-finite gradient leaves what the window read ahead for it: zero_grad
  // releases it before the next forward.
  first_forward.clear();
  begins.clear();
  ends.clear();
  c.poison_step = 1;
  const RunResult skipped = run_zero(comm, c, probe);
  ASSERT_EQ(skipped.grad_norms.size(), static_cast<size_t>(c.steps - 1)) << at << ": step 1 was not skipped";
  ASSERT_EQ(first_forward.size(), micro_steps) << at;
  EXPECT_EQ(first_forward[2 * static_cast<size_t>(c.grad_accum)], 0)
      << at << ": the states read for the skipped step are still in memory at the next step";
}

// A checkpoint saved by an offloaded run loads into a run without offload and into another
// offloaded run, and one saved without offload loads into an offloaded run: each continues the
// uninterrupted run's trajectory bit for bit (the offload files are scratch; the format is one).
// The offloaded runs have a window holding every unit, so saves and loads meet its states in
// memory or still being written.
inline void expect_checkpoints_resume_exactly_across(Communicator& comm, const RunConfig& plain, const RunConfig& off) {
  using namespace sharded;
  constexpr int k = 2, total = 4;
  SharedDir tmp(comm);
  std::vector<double> uninterrupted;
  {
    ZeroRun run(comm, plain);
    uninterrupted = run.steps(0, total);
  }
  const std::vector<double> tail(uninterrupted.begin() + k, uninterrupted.end());
  for (const RunConfig* saver : {&off, &plain}) {
    {
      ZeroRun run(comm, *saver);
      run.steps(0, k);
      save_sharded(tmp / "ckpt", *run.zero, *run.opt, run.state(k));
    }
    for (const RunConfig* loader : {&plain, &off}) {
      RunConfig rc = *loader;
      rc.seed = 99;  // nothing survives but what load restores
      ZeroRun run(comm, rc);
      load_sharded(tmp / "ckpt", *run.zero, *run.opt);
      EXPECT_EQ(run.steps(k, total), tail) << comm.prefix() << " " << stage_name(plain.stage) << " "
                                           << dtype_name(plain.dtype) << " saved "
                                           << (saver == &off ? "with" : "without") << " offload, resumed "
                                           << (loader == &off ? "with" : "without");
    }
  }
}

inline void expect_offloaded_checkpoints_resume_exactly(Communicator& comm) {
  const RunConfig plain{.stage = ZeroStage::Three, .dtype = DType::BF16};
  RunConfig off = plain;
  off.offload = nvme_offload(true);
  off.offload.window_bytes = int64_t{1} << 30;  // every unit: saved and loaded while in the window
  expect_checkpoints_resume_exactly_across(comm, plain, off);
}

// ---- optimizer offload to cpu: the host tier ([Note: host tier] in dist/zero/param_unit.cpp) ----
// On a GPU it is the real thing; on CPU ranks OffloadOptions::host_tier_on_cpu_ranks takes the same
// path with host memory on both sides, so the bookkeeping is checked where there is no GPU.

inline OffloadOptions host_tier() { return {.optimizer = OffloadTarget::Cpu, .host_tier_on_cpu_ranks = true}; }

// Every stage, f32 without and bf16 with accumulation, on `device`: the host tier gives the bits
// of the same run without offload (on a GPU the CPU's update stands in for the GPU's kernel:
// their arithmetic is the same, rounding for rounding). On CPU ranks also with ZeRO-3's
// parameter shards on NVMe.
inline void expect_host_tier_bit_identical(Communicator& comm, Device device = Device::cpu()) {
  for (ZeroStage stage : kAllStages)
    for (DType dt : {DType::F32, DType::BF16}) {
      const int accum = dt == DType::BF16 ? 2 : 1;
      RunConfig c{.stage = stage, .dtype = dt, .grad_accum = accum, .batch = 8, .device = device};
      const RunResult ref = run_zero(comm, c);
      c.offload = host_tier();
      const std::string what =
          detail::str(stage_name(stage), " ", dtype_name(dt), " accum ", accum, " optimizer on the host");
      expect_same_bits(comm, run_zero(comm, c), ref, what);
      if (stage != ZeroStage::Three || device.is_cuda()) continue;
      c.offload.params = OffloadTarget::Nvme;
      c.offload.dir = std::filesystem::temp_directory_path().string();
      expect_same_bits(comm, run_zero(comm, c), ref, what + ", parameter shards on nvme");
    }
  // A step skipped for a non-finite gradient, native reduction (ZeRO-2 with no_sync too), and
  // hybrid sharding where the world allows it.
  std::vector<std::pair<std::string, RunConfig>> more = {
      {"zero3 bf16, step 1 skipped", {.stage = ZeroStage::Three, .dtype = DType::BF16, .poison_step = 1}},
      {"zero1 native", {.stage = ZeroStage::One, .grad_accum = 2, .batch = 8, .reduction = GradReduction::Native}},
      {"zero2 native no_sync",
       {.stage = ZeroStage::Two, .grad_accum = 2, .batch = 8, .reduction = GradReduction::Native, .no_sync = true}}};
  if (comm.size() >= 4 && device.is_cpu())
    more.push_back({"zero3 hybrid, groups of 2", {.stage = ZeroStage::Three, .batch = 8, .shard_group = 2}});
  for (auto& [what, cfg] : more) {
    RunConfig c = cfg;
    c.device = device;
    const RunResult ref = run_zero(comm, c);
    c.offload = host_tier();
    expect_same_bits(comm, run_zero(comm, c), ref, what + ", optimizer on the host");
  }
}

// After a step, every stage, f32 and bf16: the host holds exactly host_tier_bytes_closed_form
// (masters and moments, 12 bytes per element the rank updates; the exchange, s per element) and
// the device exactly state_bytes_closed_form less its OptimizerState. On CPU ranks both places
// are the host: the ledger holds their sum.
inline void expect_host_tier_memory_closed_form(Communicator& comm, Device device = Device::cpu()) {
  using MC = MemoryCategory;
  const MC cats[] = {MC::Parameter, MC::ParameterShard, MC::Gradient, MC::GradientShard, MC::OptimizerState};
  for (ZeroStage stage : kAllStages)
    for (DType dt : {DType::F32, DType::BF16}) {
      std::map<MC, int64_t> dev0, host0;
      for (MC k : cats) {
        dev0[k] = memory_ledger().stats(device).current_of(k);
        host0[k] = memory_ledger().stats(Device::cpu()).current_of(k);
      }
      const RunConfig c{.stage = stage, .dtype = dt, .steps = 1, .device = device, .offload = host_tier()};
      Probe probe;
      bool checked = false;
      probe.after_step = [&](ZeroPartitioner& z, int) {
        const int64_t P = z.num_padded(), N = comm.size();
        const ElementBytes e = ElementBytes::of(dt);
        std::map<MC, int64_t> on_device = state_bytes_closed_form(stage, P, N, e), on_host;
        on_device.erase(MC::OptimizerState);
        for (auto& [k, b] : host_tier_bytes_closed_form(stage, c.offload, device, P, N, e)) on_host[k] += b;
        if (device.is_cpu()) {
          for (auto& [k, b] : on_device) on_host[k] += b;
          on_device.clear();
        }
        const std::string what = detail::str(comm.prefix(), " ", stage_name(stage), " ", dtype_name(dt));
        for (MC k : cats) {
          EXPECT_EQ(memory_ledger().stats(Device::cpu()).current_of(k) - host0[k], on_host[k])
              << what << ": host " << category_name(k);
          if (device.is_cuda())
            EXPECT_EQ(memory_ledger().stats(device).current_of(k) - dev0[k], on_device[k])
                << what << ": device " << category_name(k);
        }
        checked = true;
      };
      run_zero(comm, c, probe);
      EXPECT_TRUE(checked);
    }
}

// After a step the exchange buffer holds parameters (they went up through it): an optimizer step
// that finds no fresh download since (a second step on the same gradients; a checkpoint loaded
// between the backward and the step; a step after zero_grad with no backward) must read the
// gradients anyway, as the run without offload does. ZeRO-3 and DDP, f32 and bf16: every
// parameter equal.
inline void expect_host_tier_rereads_gradients(Communicator& comm, Device device = Device::cpu()) {
  using namespace sharded;
  SharedDir tmp(comm);
  for (ZeroStage stage : {ZeroStage::DDP, ZeroStage::Three})
    for (DType dt : {DType::F32, DType::BF16}) {
      std::map<std::string, std::vector<double>> params[2];
      for (int host : {0, 1}) {
        RunConfig c{.stage = stage, .dtype = dt, .device = device};
        if (host) c.offload = host_tier();
        ZeroRun run(comm, c);
        run.steps(0, 1);
        if (!host) save_sharded(tmp / "ckpt", *run.zero, *run.opt, run.state(1));
        Trainer t = make_trainer(*run.zero, *run.opt, c);
        t.forward_backward(1, harness_rows(c, run.model->config.vocab_size), gpt_loss(*run.model));
        const double scale = run.zero->clip_grad_norm(c.clip);
        run.opt->step(scale);
        run.opt->step(scale);  // the same gradients again
        load_sharded(tmp / "ckpt", *run.zero, *run.opt);
        run.opt->step(scale);  // after a load: the parameters went up, the gradients are still there
        run.zero->zero_grad();
        run.opt->step(1.0);  // on zeroed gradients: no backward since
        run.zero->zero_grad();
        params[host] = run.params();
      }
      for (auto& [name, v] : params[0])
        EXPECT_TRUE(params[1].at(name) == v) << comm.prefix() << " " << stage_name(stage) << " " << dtype_name(dt)
                                             << ": parameter " << name << " differs by " << rel_l2(params[1].at(name), v);
    }
}

// A checkpoint saved with the host tier loads into a run without it and back, continuing the
// uninterrupted trajectory bit for bit (ZeRO-3 bf16 and ZeRO-1 f32).
inline void expect_host_tier_checkpoints_resume_exactly(Communicator& comm, Device device = Device::cpu()) {
  for (auto [stage, dt] : {std::pair{ZeroStage::Three, DType::BF16}, std::pair{ZeroStage::One, DType::F32}}) {
    const RunConfig plain{.stage = stage, .dtype = dt, .device = device};
    RunConfig off = plain;
    off.offload = host_tier();
    expect_checkpoints_resume_exactly_across(comm, plain, off);
  }
}

}  // namespace zdl::dist::testing

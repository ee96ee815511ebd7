// Offload test cases (docs/offload.md), written once for any world size: test_dist at N = 1,
// test_dist_mpi at N = 2, 4. Offload moves bytes, never arithmetic: every run here is compared
// with the same run without offload bit for bit.
#pragma once
#include <filesystem>
#include <string>

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
inline void expect_offloaded_checkpoints_resume_exactly(Communicator& comm) {
  using namespace sharded;
  constexpr int k = 2, total = 4;
  SharedDir tmp(comm);
  const RunConfig plain{.stage = ZeroStage::Three, .dtype = DType::BF16};
  const RunConfig off = [&] {
    RunConfig c = plain;
    c.offload = nvme_offload(true);
    c.offload.window_bytes = int64_t{1} << 30;  // every unit: saved and loaded while in the window
    return c;
  }();
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
      EXPECT_EQ(run.steps(k, total), tail) << comm.prefix() << " saved " << (saver == &off ? "with" : "without")
                                           << " offload, resumed " << (loader == &off ? "with" : "without");
    }
  }
}

}  // namespace zdl::dist::testing

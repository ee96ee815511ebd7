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

// A checkpoint saved by an offloaded run loads into a run without offload and into another
// offloaded run, and one saved without offload loads into an offloaded run: each continues the
// uninterrupted run's trajectory bit for bit (the offload files are scratch; the format is one).
inline void expect_offloaded_checkpoints_resume_exactly(Communicator& comm) {
  using namespace sharded;
  constexpr int k = 2, total = 4;
  SharedDir tmp(comm);
  const RunConfig plain{.stage = ZeroStage::Three, .dtype = DType::BF16};
  const RunConfig off = [&] {
    RunConfig c = plain;
    c.offload = nvme_offload(true);
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

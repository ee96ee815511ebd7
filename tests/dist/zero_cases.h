// The ZeRO test cases, written once for any world size: TEST bodies in test_dist (N = 1) and
// test_dist_mpi (N = 2, 4) call these with their communicator. Every rank runs the same
// collectives, so assertions are EXPECTs (a failing rank must not skip a collective).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>

#include "dist/zero/closed_forms.h"
#include "dist/comm/comm_ledger.h"
#include "dist/comm/local_communicator.h"
#include "kernels/cpu/square_sum.h"
#include "zero_harness.h"

namespace zdl::dist::testing {

inline const ZeroStage kAllStages[] = {ZeroStage::DDP, ZeroStage::One, ZeroStage::Two, ZeroStage::Three};

// k steps of ZeRO at N ranks == single-process training on the same micro-batches (plain
// modules and optim::AdamW, micro-batches summed pairwise): every loss and every parameter
// within tol (relative; 0: bit for bit).
inline void expect_equivalent(Communicator& comm, RunConfig c, double tol) {
  RunResult ref = run_reference(c, comm.size());
  RunResult got = run_zero(comm, c);
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  for (size_t s = 0; s < ref.losses.size(); ++s)
    EXPECT_LE(std::abs(got.losses[s] - ref.losses[s]), tol * std::abs(ref.losses[s]))
        << comm.prefix() << " " << stage_name(c.stage) << " step " << s + 1 << ": loss " << got.losses[s]
        << " vs single-process " << ref.losses[s];
  EXPECT_EQ(got.params.size(), ref.params.size());
  for (auto& [name, v] : ref.params) {
    double err = rel_l2(got.params[name], v);
    EXPECT_LE(err, tol) << comm.prefix() << " " << stage_name(c.stage) << " parameter " << name
                        << " differs from single-process training by " << err;
  }
}

// [Note: exact equivalence] The same steps give the same bits on N ranks as in one process
// (ZeRO on a LocalCommunicator with N times the micro-batches of 1/N the rows; and, for f32,
// plain training with optim::AdamW), under every stage: each loss and each parameter element
// compared with ==.
inline void expect_identical(Communicator& comm, const RunConfig& c) {
  const std::string what = detail::str(comm.prefix(), " ", stage_name(c.stage), " ", dtype_name(c.dtype), " N=",
                                       comm.size(), " shard group ", c.shard_group, c.secondary_partition ? " hpZ" : "",
                                       " accum ", c.grad_accum, " dropout ", c.dropout, " checkpoint every ",
                                       c.checkpoint_every);
  LocalCommunicator local;
  std::vector<std::pair<std::string, RunResult>> refs;
  refs.emplace_back("one process's", run_zero(local, local_equivalent(c, comm.size())));
  if (c.dtype == DType::F32) refs.emplace_back("plain training's", run_reference(c, comm.size()));
  RunResult got = run_zero(comm, c);
  for (auto& [whose, ref] : refs) {
    EXPECT_EQ(got.losses, ref.losses) << what << ": losses differ from " << whose;
    EXPECT_EQ(got.grad_norms, ref.grad_norms) << what << ": gradients differ from " << whose << "'s";
    for (auto& [name, v] : ref.params)
      EXPECT_TRUE(got.params[name] == v) << what << ": parameter " << name << " differs from " << whose << " by "
                                         << rel_l2(got.params[name], v) << " (relative L2)";
  }
}

// Activation checkpointing changes no bit: with every block or every other block recomputed in
// backward (dropout on, gradient accumulation), losses and parameters equal the run without it,
// and one process's run without it. Also with units inside the checkpointed blocks (attention
// and MLP): ZeRO-3 then gathers them again for the recompute, and must leave none gathered.
inline void expect_checkpointing_identical(Communicator& comm, ZeroStage stage) {
  const RunConfig plain{.stage = stage, .grad_accum = 2, .batch = 8, .dropout = 0.1};
  LocalCommunicator local;
  const RunResult ref = run_zero(local, local_equivalent(plain, comm.size()));
  Probe all_freed;
  all_freed.after_step = [&comm](ZeroPartitioner& z, int step) {
    if (z.stage() != ZeroStage::Three) return;
    for (const ParamUnit* u : z.units())
      EXPECT_EQ(u->param_state(), ParamState::Sharded)
          << comm.prefix() << " unit " << u->name() << " still gathered after step " << step + 1;
  };
  auto inside_blocks = [](const nn::Module& m) {
    return m.type_name() == "CausalSelfAttention" || m.type_name() == "MLP";
  };
  for (int64_t every : {0, 1, 2, -1}) {  // -1: every block, with units inside the blocks
    RunConfig c = plain;
    c.checkpoint_every = every < 0 ? 1 : every;
    if (every < 0) c.is_unit = inside_blocks;
    const RunResult got = run_zero(comm, c, all_freed);
    const std::string what = detail::str(comm.prefix(), " ", stage_name(stage), " N=", comm.size(), " checkpoint every ",
                                         c.checkpoint_every, " block(s)", every < 0 ? ", units inside the blocks" : "");
    EXPECT_EQ(got.losses, ref.losses) << what << ": losses differ from one process without checkpointing";
    for (auto& [name, v] : ref.params)
      EXPECT_TRUE(got.params.at(name) == v) << what << ": parameter " << name << " differs by "
                                            << rel_l2(got.params.at(name), v) << " (relative L2)";
  }
}

// Model-state bytes on this rank after a step, per category, equal the closed forms of the
// paper evaluated at the padded size P (the padding is < N elements per unit):
//   f32: params 4P, grads 4P, Adam 8P; stage 1: Adam / N; stage 2: + grads / N; stage 3: all / N.
//   bf16: params 2P, grads 2P, optimizer 12P (f32 master weights and Adam's moments: K = 12).
// shard_group: hybrid sharding's K (0: all N ranks); each rank then holds its group's share, 1/K.
inline void expect_memory_closed_form(Communicator& comm, ZeroStage stage, DType dtype = DType::F32, int shard_group = 0) {
  const int64_t N = comm.size(), K = shard_group == 0 ? N : shard_group;
  auto cur = [](MemoryCategory k) { return memory_ledger().stats(Device::cpu()).current_of(k); };
  const MemoryCategory cats[] = {MemoryCategory::Parameter, MemoryCategory::ParameterShard, MemoryCategory::Gradient,
                                 MemoryCategory::GradientShard, MemoryCategory::OptimizerState};
  std::map<MemoryCategory, int64_t> base;
  for (auto k : cats) base[k] = cur(k);
  RunConfig c{.stage = stage, .dtype = dtype, .steps = 1, .batch = std::max<int64_t>(4, N), .shard_group = shard_group};
  const ElementBytes bytes = ElementBytes::of(dtype);
  Probe probe;
  probe.after_wrap = [](ZeroPartitioner&) { memory_ledger().reset_peaks(Device::cpu()); };
  probe.after_step = [&](ZeroPartitioner& z, int) {
    // ZeRO-2/3's point during the step: full gradients live only for the root unit (its
    // backward spans the whole pass: head first, embeddings last), the block being computed and
    // the one whose reduction is in flight, never for every block at once.
    if (stage == ZeroStage::Two || stage == ZeroStage::Three) {
      int64_t root = 0, block = 0;
      for (const ParamUnit* u : z.units()) {
        int64_t& largest = u->name() == "<root>" ? root : block;
        largest = std::max(largest, u->padded());
      }
      const int64_t peak = memory_ledger().stats(Device::cpu()).peak_of(MemoryCategory::Gradient) - base[MemoryCategory::Gradient];
      EXPECT_LE(peak, bytes.s * (root + 2 * block)) << comm.prefix() << " " << stage_name(stage)
                                              << ": peak full-gradient bytes during the step";
    }
    const int64_t P = z.num_padded(), psi = z.num_parameters();
    EXPECT_LT(P - psi, N * static_cast<int64_t>(z.units().size()));
    std::map<MemoryCategory, int64_t> want = state_bytes_closed_form(stage, P, K, bytes);
    for (auto k : cats)
      EXPECT_EQ(cur(k) - base[k], want[k]) << comm.prefix() << " " << stage_name(stage) << " " << dtype_name(dtype)
                                           << " " << category_name(k) << " bytes (P=" << P << ", N=" << N << ", K=" << K
                                           << ")";
  };
  run_zero(comm, c, probe);
}

// dist::gpt_padded_units predicts the partitioner's units of a GPT it never built: the same
// padded sizes, unit for unit, at this N (the harness's C = 10 pads at N = 4).
inline void expect_gpt_units_predicted(Communicator& comm) {
  Probe probe;
  probe.after_wrap = [&](ZeroPartitioner& z) {
    PaddedUnits got;
    for (const ParamUnit* u : z.units()) {
      if (u->name() == "<root>") got.root = u->padded();
      else got.blocks.push_back(u->padded());
    }
    const PaddedUnits want = gpt_padded_units(tiny_gpt(), comm.size());
    EXPECT_EQ(got.root, want.root) << comm.prefix();
    EXPECT_EQ(got.blocks, want.blocks) << comm.prefix();
  };
  run_zero(comm, RunConfig{.stage = ZeroStage::Three, .steps = 1}, probe);
}

// Bytes on the wire in one step equal the closed forms at the padded size (f32, 4 bytes):
// DDP: all-reduce 4P; ZeRO-1/2: reduce-scatter 4P + post-step all-gather 4P (2 Psi);
// ZeRO-3: forward all-gather 4P + backward all-gather 4P + reduce-scatter 4P (3 Psi);
// wire = payload x (N-1)/N (x 2 for all-reduce).
// With checkpoint_every > 0 the blocks recompute in backward: under ZeRO-3 inside their backward
// gather window, so the traffic is the same 3 Psi.
inline std::vector<int64_t> padded_sizes(const ZeroPartitioner& z) {
  std::vector<int64_t> out;
  for (const ParamUnit* u : z.units()) out.push_back(u->padded());
  return out;
}

// layout: hybrid sharding's group and the nodes the ranks are posed on (comm's, which must agree);
// its N is comm's. The bytes crossing nodes are checked too.
inline void expect_traffic_closed_form(Communicator& comm, ZeroStage stage, int64_t checkpoint_every = 0,
                                       RankLayout layout = {}, int grad_accum = 1) {
  const int64_t N = comm.size();
  layout.N = N;
  RunConfig c{.stage = stage, .steps = 2, .grad_accum = grad_accum, .batch = std::max<int64_t>(4, N),
              .checkpoint_every = checkpoint_every,
              .shard_group = static_cast<int>(layout.shard_group), .secondary_partition = layout.secondary_partition,
              .quantize_weights = layout.quantize_weights, .quantize_grads = layout.quantize_grads};
  Probe probe;
  probe.after_wrap = [](ZeroPartitioner&) { comm_ledger().reset(); };
  probe.after_step = [&](ZeroPartitioner& z, int step) {
    auto st = [](CollectiveKind k, CommPhase p) { return comm_ledger().stats(k, p); };
    std::vector<ExpectedTraffic> want;
    for (const ExpectedTraffic& w :
         traffic_closed_form(stage, padded_sizes(z), layout, ElementBytes::of(DType::F32), grad_accum))
      if (w.phase != CommPhase::Other) want.push_back(w);  // the norm's words: bounded below
    int64_t counted = 0;
    for (auto& w : want) {
      EXPECT_EQ(st(w.kind, w.phase).payload_bytes, w.payload)
          << comm.prefix() << " " << stage_name(stage) << " step " << step + 1 << " " << collective_name(w.kind) << "/"
          << phase_name(w.phase);
      EXPECT_EQ(st(w.kind, w.phase).wire_bytes, w.wire)
          << comm.prefix() << " " << stage_name(stage) << " " << collective_name(w.kind) << "/" << phase_name(w.phase);
      EXPECT_EQ(st(w.kind, w.phase).inter_node_wire_bytes, w.inter_node)
          << comm.prefix() << " " << stage_name(stage) << " K=" << layout.K() << " R=" << layout.R() << " "
          << collective_name(w.kind) << "/" << phase_name(w.phase) << ": inter-node bytes";
      counted += w.payload;
    }
    // Nothing else moved model bytes: what remains is the gradient-norm all-reduce (the exact
    // sum's words, stages 1-3) and the step's loss all-reduce (a slot per micro-batch, two that
    // count interrupted ranks: dist/zero/trainer.cpp).
    int64_t other = comm_ledger().total().payload_bytes - counted;
    EXPECT_LE(other, 8 * (kernels::cpu::ExactSquareSum::kSerializedSize + N * c.grad_accum + 2))
        << comm.prefix() << " " << stage_name(stage) << ": unexpected traffic";
    comm_ledger().reset();
  };
  run_zero(comm, c, probe);
}

// Under ZeRO-3 each rank initializes only its shard, bit-identical to the same slice of a
// single-process init; parameters read outside forward/backward raise a clear error.
inline void expect_zero3_shards_match_full_init(Communicator& comm) {
  std::shared_ptr<nn::GPT> full;
  {
    nn::InitContext ctx(11);
    full = std::make_shared<nn::GPT>(tiny_gpt());
  }
  std::shared_ptr<Communicator> shared(&comm, [](Communicator*) {});
  ZeroPartitioner zero(shared, ZeroOptions{.stage = ZeroStage::Three});
  std::shared_ptr<nn::GPT> model;
  {
    auto scope = zero.placement_scope(11);
    model = std::make_shared<nn::GPT>(tiny_gpt());
  }
  zero.wrap(*model);
  // The expected shards from the layout's definition, not the library's offsets: each block's
  // parameters (then the rest, the root) concatenated in registration order, padded to a
  // multiple of N; rank r holds elements [r ceil(n / N), (r + 1) ceil(n / N)).
  const int64_t N = comm.size(), r = comm.rank();
  std::vector<std::vector<double>> expected(model->h.size() + 1);
  for (auto& [name, p] : full->named_parameters()) {
    size_t unit = model->h.size();  // the root
    for (size_t b = 0; b < model->h.size(); ++b)
      if (name.rfind(detail::str("h.", b, "."), 0) == 0) unit = b;
    for (double v : p.to_vector()) expected[unit].push_back(v);
  }
  const std::vector<OptimizerShard> shards = zero.optimizer_shards();  // f32 ZeRO-3: the master is the shard
  ASSERT_EQ(shards.size(), expected.size());
  for (size_t u = 0; u < shards.size(); ++u) {
    const int64_t n = static_cast<int64_t>(expected[u].size()), size = (n + N - 1) / N;
    std::vector<double> slice(static_cast<size_t>(size), 0.0);
    for (int64_t i = 0; i < size && r * size + i < n; ++i) slice[static_cast<size_t>(i)] = expected[u][static_cast<size_t>(r * size + i)];
    EXPECT_EQ(shards[u].master.to_vector(), slice) << comm.prefix() << " unit " << u;
  }
  try {
    model->h[1]->mlp->c_fc->weight.to_vector();
    ADD_FAILURE() << "reading a sharded parameter outside forward did not fail";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("h.1.mlp.c_fc.weight"), std::string::npos) << m;
    EXPECT_NE(m.find("GatheredParameters"), std::string::npos) << m;
  }
  GatheredParameters g(zero);
  EXPECT_EQ(model->h[1]->mlp->c_fc->weight.to_vector(), full->h[1]->mlp->c_fc->weight.to_vector());
}

// A traced ZeRO-3 step's timing events are consistent: events arrive in time order, except
// GatherFinished, which is reported when its gather is waited for and timed when the bytes
// arrived: after its GatherIssue, at or before the GatherDone reported right after it. Each unit's
// SyncBegin/SyncEnd (the wait for the other ranks, N > 1 only) pair up and come just before the
// collective they guard. Returns the number of gathers with a finish time.
inline int expect_gather_timing_consistent(const Communicator& comm, const std::vector<TraceEvent>& events) {
  std::map<std::string, double> issued, synced;
  int finished = 0, syncs = 0;
  double last = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    const TraceEvent& e = events[i];
    const std::string what = detail::str(comm.prefix(), " event ", i, " ", trace_kind_name(e.kind), " ", e.unit);
    if (e.kind == TraceKind::GatherFinished) {
      ++finished;
      EXPECT_TRUE(issued.count(e.unit)) << what << ": no GatherIssue before it";
      if (issued.count(e.unit)) EXPECT_GE(e.t_us, issued[e.unit]) << what;
      const bool done_next =
          i + 1 < events.size() && events[i + 1].kind == TraceKind::GatherDone && events[i + 1].unit == e.unit;
      EXPECT_TRUE(done_next) << what << ": not followed by its GatherDone";
      if (done_next) EXPECT_LE(e.t_us, events[i + 1].t_us) << what << ": finished after it was waited for";
      continue;
    }
    EXPECT_GE(e.t_us, last) << what << ": out of time order";
    last = e.t_us;
    if (e.kind == TraceKind::GatherIssue) issued[e.unit] = e.t_us;
    if (e.kind == TraceKind::SyncBegin) {
      EXPECT_FALSE(synced.count(e.unit)) << what << ": a second SyncBegin before its SyncEnd";
      synced[e.unit] = e.t_us;
    }
    if (e.kind == TraceKind::SyncEnd) {
      ++syncs;
      EXPECT_EQ(synced.erase(e.unit), 1u) << what << ": no SyncBegin";
      const bool next_is_its_collective =
          i + 1 < events.size() && events[i + 1].unit == e.unit &&
          (events[i + 1].kind == TraceKind::GatherIssue || events[i + 1].kind == TraceKind::ReduceBegin);
      EXPECT_TRUE(next_is_its_collective) << what << ": not followed by the collective it guards";
    }
  }
  EXPECT_TRUE(synced.empty()) << comm.prefix() << " a SyncBegin without its SyncEnd";
  EXPECT_EQ(syncs > 0, comm.size() > 1) << comm.prefix() << " " << syncs << " syncs at N = " << comm.size();
  return finished;
}

// One traced ZeRO-3 step (prefetch 1) through the harness: every gather reports when its bytes
// arrived, and the timing events are consistent.
inline void expect_traced_gathers_timed(Communicator& comm) {
  std::vector<TraceEvent> events;
  Probe probe;
  probe.after_wrap = [&](ZeroPartitioner& z) { z.set_trace([&](const TraceEvent& e) { events.push_back(e); }); };
  run_zero(comm, {.stage = ZeroStage::Three, .steps = 1}, probe);
  int gathers = 0;
  for (const TraceEvent& e : events) gathers += e.kind == TraceKind::GatherIssue;
  EXPECT_GT(gathers, 0);
  EXPECT_EQ(expect_gather_timing_consistent(comm, events), gathers) << comm.prefix() << " gathers without a finish time";
}

}  // namespace zdl::dist::testing

namespace zdl::dist::testing {

// A NaN in one parameter's gradient on the last rank, before any reduction, is seen by every
// rank (through the gradient-norm all-reduce), blamed on its unit alone, and skipping that step
// leaves no trace: the run ends where single-process training that skipped it ends.
inline void expect_nonfinite_step_detected_and_skipped(Communicator& comm, ZeroStage stage, double tol) {
  RunConfig c{.stage = stage, .poison_step = 1};
  RunResult ref = run_reference(c, comm.size());
  RunResult got = run_zero(comm, c);
  ASSERT_EQ(got.nonfinite.size(), static_cast<size_t>(c.steps));
  for (int s = 0; s < c.steps; ++s) {
    if (s != c.poison_step) {
      EXPECT_TRUE(got.nonfinite[s].empty()) << comm.prefix() << " " << stage_name(stage) << " step " << s + 1;
      continue;
    }
    ASSERT_EQ(got.nonfinite[s].size(), 1u) << comm.prefix() << " " << stage_name(stage);
    EXPECT_EQ(got.nonfinite[s][0].name, "h.1") << comm.prefix() << " " << stage_name(stage);
    // DDP: the all-reduce spreads the NaN to every rank's copy; ZeRO: it lands in the shard
    // that holds that element (one rank).
    EXPECT_EQ(got.nonfinite[s][0].ranks, stage == ZeroStage::DDP ? comm.size() : 1) << comm.prefix();
  }
  for (auto& [name, v] : ref.params)
    EXPECT_LE(rel_l2(got.params[name], v), tol) << comm.prefix() << " " << stage_name(stage) << " " << name;
}

// A SIGTERM that reaches one rank (the last) inside an io::InterruptScope is seen by every rank
// at the end of that step, through the step's own all-reduce, and changes nothing else: the
// losses and parameters are the uninterrupted run's, bit for bit.
inline void expect_interrupt_on_one_rank_is_seen_by_every_rank(Communicator& comm, ZeroStage stage) {
  RunConfig c{.stage = stage};
  RunResult plain = run_zero(comm, c);
  c.interrupt_step = 1;
  RunResult got = run_zero(comm, c);
  EXPECT_EQ(got.stop_signals, (std::vector<int>{0, SIGTERM, SIGTERM})) << comm.prefix() << " " << stage_name(stage);
  EXPECT_EQ(got.losses, plain.losses) << comm.prefix() << " " << stage_name(stage);
  EXPECT_EQ(got.params, plain.params) << comm.prefix() << " " << stage_name(stage);
}

// bf16 compute (f32 masters and moments) follows the f32 trajectory to bf16 accuracy: the
// losses of every step within 1%. Parameters drift further (Adam turns the bf16 rounding of
// tiny gradients into full-size lr steps of either sign), so they are held only to 25%
// relative L2: enough to catch a wrong shard, a missed cast or a lost update (~100%).
inline void expect_bf16_tracks_f32(Communicator& comm, ZeroStage stage) {
  RunConfig c{.stage = stage, .dtype = DType::BF16};
  const Bf16Prediction p = bf16_prediction(c, comm.size());
  expect_within_bf16_prediction(run_zero(comm, c), p, detail::str(comm.prefix(), " bf16 ", stage_name(stage)));
}

}  // namespace zdl::dist::testing

// Sharded checkpoint test cases, written once for any world size (test_dist at N = 1,
// test_dist_mpi at N = 2, 4). Every rank runs the same collectives, so assertions around
// them are EXPECTs; files are manipulated by rank 0 between barriers.
//
// The trajectory contract (docs/design.md, mechanism 6): k steps under ZeRO-3, save, load into a
// fresh run of any stage (or, across binaries, any world size), and the following steps'
// losses equal those of an uninterrupted run (bit-for-bit under the same stage and N;
// within reduction-order rounding otherwise).
#pragma once
#include <optional>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "autograd/grad_mode.h"
#include "core/hash.h"
#include "dist/checkpoint/sharded_checkpoint.h"
#include "io/gpt2_format.h"
#include "temp_dir.h"
#include "zero_cases.h"

namespace zdl::dist::testing {

namespace sharded {

namespace fs = std::filesystem;

// A directory every rank sees: named after rank 0's pid and a per-process counter (all ranks
// run the same tests, so the counters agree), created and removed by rank 0.
class SharedDir {
 public:
  explicit SharedDir(Communicator& comm) : comm_(comm) {
    static int counter = 0;
    const int64_t pid0 = comm.all_gather_i64(static_cast<int64_t>(::getpid()))[0];
    path_ = (fs::temp_directory_path() / ("zdl_sharded_test_" + std::to_string(pid0) + "_" + std::to_string(counter++)))
                .string();
    if (comm.rank() == 0) {
      fs::remove_all(path_);
      fs::create_directories(path_);
    }
    comm.barrier();
  }
  ~SharedDir() {
    comm_.barrier();
    std::error_code ec;
    if (comm_.rank() == 0) fs::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  Communicator& comm_;
  std::string path_;
};

using ::zdl::testing::read_bytes;
using ::zdl::testing::write_bytes;

// Runs `edit` on rank 0 only, between barriers.
template <class F>
void on_rank0(Communicator& comm, F&& edit) {
  comm.barrier();
  if (comm.rank() == 0) edit();
  comm.barrier();
}

// The message of the zdl::Error that f throws, or "" when it throws none.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// train_gpt's config JSON (examples/train_gpt.cpp config_json), which consolidation reads.
inline std::string config_json(const nn::GPTConfig& c) {
  return detail::str("{\"vocab_size\": ", c.vocab_size, ", \"padded_vocab_size\": ", c.padded_vocab_size,
                     ", \"block_size\": ", c.block_size, ", \"n_layer\": ", c.n_layer, ", \"n_head\": ", c.n_head,
                     ", \"n_embd\": ", c.n_embd, ", \"dropout\": ", c.dropout, "}");
}

// One ZeRO training run of the harness's tiny GPT on the harness's batches, step by step.
struct ZeroRun {
  Communicator& comm;
  RunConfig c;
  std::unique_ptr<ZeroPartitioner> zero;
  std::shared_ptr<nn::GPT> model;
  std::unique_ptr<ZeroAdamW> opt;

  ZeroRun(Communicator& comm, RunConfig cfg, std::optional<nn::GPTConfig> gpt = std::nullopt) : comm(comm), c(cfg) {
    std::shared_ptr<Communicator> shared(&comm, [](Communicator*) {});
    zero = std::make_unique<ZeroPartitioner>(
        shared, ZeroOptions{.stage = c.stage, .compute_dtype = c.dtype, .device = c.device, .reduction = c.reduction,
                            .shard_group = c.shard_group, .secondary_partition = c.secondary_partition,
                            .quantize_weights = c.quantize_weights, .quantize_grads = c.quantize_grads,
                            .offload = c.offload});
    {
      auto scope = zero->placement_scope(c.seed);
      model = std::make_shared<nn::GPT>(gpt ? *gpt : tiny_gpt(c.dropout));
    }
    zero->wrap(*model);
    opt = std::make_unique<ZeroAdamW>(*zero, adam_opts(), 0.1);
  }
  // Step s of the harness's sequences; the global mean loss.
  double step(int s) {
    Trainer trainer = make_trainer(*zero, *opt, c);
    return trainer.step(s, harness_rows(c, model->config.vocab_size), gpt_loss(*model)).loss;
  }
  std::vector<double> steps(int from, int to) {
    std::vector<double> out;
    for (int s = from; s < to; ++s) out.push_back(step(s));
    return out;
  }
  io::TrainState state(int steps_done) const {
    return {.step = steps_done,
            .data_position = steps_done * c.batch * c.grad_accum,
            .counters = {{"seed", c.seed}},
            .metadata = {{"config", config_json(model->config)}, {"saved_by_world_size", std::to_string(comm.size())}}};
  }
  // Full parameters by name (collective).
  std::map<std::string, std::vector<double>> params() {
    GatheredParameters g(*zero);
    std::map<std::string, std::vector<double>> out;
    for (auto& [n, p] : model->named_parameters()) out[n] = p.to(DType::F64).to_vector();
    return out;
  }
};

inline void expect_losses_near(Communicator& comm, const std::vector<double>& got, const std::vector<double>& want,
                               double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_LE(std::abs(got[i] - want[i]), tol * std::abs(want[i]))
        << comm.prefix() << " " << what << ": loss " << i << " after resuming " << got[i] << " vs uninterrupted "
        << want[i];
}

}  // namespace sharded

// Save after k steps under `saved_under` (ZeRO-3 by default); a fresh run of every stage
// (built from another init seed, so nothing survives but what load restores) continues on the
// uninterrupted trajectory: exactly under the saving stage itself, within tol under the others
// (other reduction order).
inline void expect_resume_continues_trajectory(Communicator& comm, DType dtype, double tol,
                                               ZeroStage saved_under = ZeroStage::Three) {
  using namespace sharded;
  constexpr int k = 2, total = 5;
  SharedDir tmp(comm);
  const RunConfig c{.stage = saved_under, .dtype = dtype};
  std::vector<double> uninterrupted, final_zero3;
  std::map<std::string, std::vector<double>> uninterrupted_params;
  {
    ZeroRun run(comm, c);
    uninterrupted = run.steps(0, total);
    uninterrupted_params = run.params();
  }
  io::TrainState saved;
  {
    ZeroRun run(comm, c);
    run.steps(0, k);
    saved = run.state(k);
    save_sharded(tmp / "ckpt", *run.zero, *run.opt, saved);
  }
  const std::vector<double> tail(uninterrupted.begin() + k, uninterrupted.end());
  for (ZeroStage stage : kAllStages) {
    RunConfig rc = c;
    rc.stage = stage;
    rc.seed = 99;
    ZeroRun run(comm, rc);
    io::TrainState st = load_sharded(tmp / "ckpt", *run.zero, *run.opt);
    EXPECT_TRUE(st == saved) << comm.prefix() << " " << stage_name(stage) << ": the TrainState differs";
    EXPECT_EQ(run.opt->step_count(), k);
    const double t = stage == saved_under ? 0.0 : tol;
    expect_losses_near(comm, run.steps(k, total), tail, t, std::string("resumed under ") + stage_name(stage));
    auto params = run.params();
    for (auto& [name, v] : uninterrupted_params)
      EXPECT_LE(rel_l2(params[name], v), t) << comm.prefix() << " " << stage_name(stage) << " " << name;
  }
}

// A corrupted (flipped byte) or truncated rank file, a layout edited to another shape and a
// newer format version are each rejected on every rank with a clear error, before any value
// is read; a good checkpoint still loads afterwards (the ranks stayed in step).
inline void expect_bad_checkpoints_rejected(Communicator& comm) {
  using namespace sharded;
  SharedDir tmp(comm);
  const int N = comm.size();
  const std::string dir = tmp / "ckpt";
  ZeroRun run(comm, {.stage = ZeroStage::Three});
  run.steps(0, 1);
  save_sharded(dir, *run.zero, *run.opt, run.state(1));
  on_rank0(comm, [&] { fs::copy(dir, tmp / "good", fs::copy_options::recursive); });
  auto restore = [&] {
    on_rank0(comm, [&] {
      fs::remove_all(dir);
      fs::copy(tmp / "good", dir, fs::copy_options::recursive);
    });
  };
  const std::string last = "rank-" + std::to_string(N - 1) + "-of-" + std::to_string(N) + ".safetensors";
  const std::string first = "rank-0-of-" + std::to_string(N) + ".safetensors";
  auto load_error = [&](ZeroStage stage) {
    ZeroRun fresh(comm, {.stage = stage, .seed = 5});
    auto before = fresh.params();
    std::string e = error_of([&] { load_sharded(dir, *fresh.zero, *fresh.opt); });
    EXPECT_EQ(fresh.params(), before) << comm.prefix() << " a rejected load changed the parameters";
    // One message on every rank, the failing rank's, under its "[rank r/N]".
    EXPECT_EQ(e.rfind("[rank ", 0), 0u) << e;
    const auto digests = comm.all_gather_i64(static_cast<int64_t>(fnv1a64(e)));
    EXPECT_TRUE(std::all_of(digests.begin(), digests.end(), [&](int64_t d) { return d == digests[0]; }))
        << comm.prefix() << " ranks got different errors: " << e;
    return e;
  };

  // One flipped byte in the last rank's data (under ZeRO-3 at N > 1 only that rank reads it:
  // the others still fail, naming the file).
  on_rank0(comm, [&] {
    std::string b = read_bytes(dir + "/" + last);
    b[b.size() - 3] ^= 0x20;
    write_bytes(dir + "/" + last, b);
  });
  for (ZeroStage stage : {ZeroStage::Three, ZeroStage::DDP}) {
    std::string e = load_error(stage);
    EXPECT_TRUE(contains(e, last) && contains(e, "corrupted")) << comm.prefix() << " " << stage_name(stage) << ": " << e;
  }
  restore();

  // Truncated first rank file.
  on_rank0(comm, [&] { fs::resize_file(dir + "/" + first, fs::file_size(dir + "/" + first) - 10); });
  {
    std::string e = load_error(ZeroStage::Two);
    EXPECT_TRUE(contains(e, first) && (contains(e, "truncated") || contains(e, "wrong size"))) << e;
  }
  restore();

  // Layout edited to another shape: a different model.
  on_rank0(comm, [&] {
    // The first dimension of wpe.weight's shape, 8 -> 9.
    std::string j = read_bytes(dir + "/layout.json");
    size_t at = j.find("\"name\": \"wpe.weight\"");
    ASSERT_NE(at, std::string::npos) << j.substr(0, 2000);
    at = j.find_first_of("0123456789", j.find('[', j.find("\"shape\"", at)));
    ASSERT_EQ(j[at], '8') << j.substr(at, 40);
    j[at] = '9';
    write_bytes(dir + "/layout.json", j);
  });
  {
    std::string e = load_error(ZeroStage::Three);
    EXPECT_TRUE(contains(e, "different model") && contains(e, "wpe.weight") && contains(e, "[9,10]")) << e;
  }
  restore();

  // A format field of another JSON type, and a duplicate key that keeps the last value.
  on_rank0(comm, [&] {
    std::string j = read_bytes(dir + "/layout.json");
    const std::string format = "\"format\": \"zdl-sharded-checkpoint\"";
    size_t at = j.find(format);
    ASSERT_NE(at, std::string::npos);
    j.replace(at, format.size(), format + ", \"format\": 0");
    write_bytes(dir + "/layout.json", j);
  });
  {
    std::string e = load_error(ZeroStage::Three);
    EXPECT_TRUE(contains(e, "is not a sharded zdl checkpoint layout (format=0)")) << e;
  }
  restore();

  // A newer format.
  on_rank0(comm, [&] {
    std::string j = read_bytes(dir + "/layout.json");
    const std::string current = "\"format_version\": " + std::to_string(kShardedCheckpointFormatVersion);
    size_t at = j.find(current);
    ASSERT_NE(at, std::string::npos);
    j.replace(at, current.size(), "\"format_version\": 7");
    write_bytes(dir + "/layout.json", j);
  });
  {
    std::string e = load_error(ZeroStage::One);
    EXPECT_TRUE(contains(e, "newer") && contains(e, "format_version 7")) << e;
  }
  restore();

  ZeroRun fresh(comm, {.stage = ZeroStage::One, .seed = 5});
  EXPECT_EQ(error_of([&] { EXPECT_EQ(load_sharded(dir, *fresh.zero, *fresh.opt).step, 1); }), "");
}

// A save that died halfway (a stale staging directory with partial files, or the fallback
// rename that left only "<dir>.old") does not hide the previous checkpoint; the next save
// removes the debris.
inline void expect_interrupted_save_leaves_previous_checkpoint(Communicator& comm) {
  using namespace sharded;
  SharedDir tmp(comm);
  const std::string dir = tmp / "ckpt", staging = tmp / ".ckpt.saving", old = tmp / ".ckpt.old";
  ZeroRun run(comm, {.stage = ZeroStage::Three});
  run.steps(0, 1);
  save_sharded(dir, *run.zero, *run.opt, run.state(1));
  EXPECT_FALSE(fs::exists(staging));
  on_rank0(comm, [&] {
    fs::create_directories(staging);
    write_bytes(staging + "/rank-0-of-1.safetensors", "partial");
    write_bytes(staging + "/layout.json", "{\"format\": \"zdl-sharded-checkpoint\", \"format_ver");
  });
  auto loaded_step = [&](ZeroStage stage) {
    ZeroRun fresh(comm, {.stage = stage, .seed = 5});
    int64_t step = -1;
    std::string e = error_of([&] { step = load_sharded(dir, *fresh.zero, *fresh.opt).step; });
    EXPECT_EQ(e, "");
    return step;
  };
  EXPECT_EQ(loaded_step(ZeroStage::Two), 1);

  run.steps(1, 2);
  save_sharded(dir, *run.zero, *run.opt, run.state(2));
  EXPECT_FALSE(fs::exists(staging)) << "the next save must remove a stale staging directory";
  EXPECT_EQ(loaded_step(ZeroStage::Three), 2);
  EXPECT_EQ(read_sharded_train_state(dir).step, 2);

  // Without RENAME_EXCHANGE a save renames <dir> to ".old" first; a crash right then leaves
  // only the backup, which load falls back to.
  on_rank0(comm, [&] { fs::rename(dir, old); });
  EXPECT_EQ(loaded_step(ZeroStage::DDP), 2);
  run.steps(2, 3);
  save_sharded(dir, *run.zero, *run.opt, run.state(3));
  EXPECT_FALSE(fs::exists(old));
  EXPECT_EQ(loaded_step(ZeroStage::Three), 3);
}

// A save replaces only what it owns: the layout and the rank files (of any world size: stale ones
// go) and their temporaries. A user's notes, an export's files, a folder of results and a link
// written into the checkpoint directory are still there, with their bytes, after the next save.
inline void expect_save_keeps_files_it_does_not_own(Communicator& comm) {
  using namespace sharded;
  SharedDir tmp(comm);
  const std::string dir = tmp / "ckpt";
  ZeroRun run(comm, {.stage = ZeroStage::Three});
  run.steps(0, 1);
  save_sharded(dir, *run.zero, *run.opt, run.state(1));
  on_rank0(comm, [&] {
    write_bytes(dir + "/NOTES.txt", "lr 3e-3 looked best");
    write_bytes(dir + "/model.safetensors", "an export");
    fs::create_directories(dir + "/eval_results/deep");
    write_bytes(dir + "/eval_results/deep/val.txt", "1.95");
    fs::create_symlink("NOTES.txt", dir + "/latest_notes");
    write_bytes(dir + "/rank-0-of-7.safetensors", "a stale rank file of another world size");
    write_bytes(dir + "/.layout.json.tmp.Ab12Cd", "debris of an interrupted write");
  });
  run.steps(1, 2);
  save_sharded(dir, *run.zero, *run.opt, run.state(2));
  on_rank0(comm, [&] {
    EXPECT_EQ(read_bytes(dir + "/NOTES.txt"), "lr 3e-3 looked best");
    EXPECT_EQ(read_bytes(dir + "/model.safetensors"), "an export");
    EXPECT_EQ(read_bytes(dir + "/eval_results/deep/val.txt"), "1.95");
    EXPECT_TRUE(fs::is_symlink(dir + "/latest_notes"));
    EXPECT_EQ(fs::read_symlink(dir + "/latest_notes"), "NOTES.txt");
    EXPECT_FALSE(fs::exists(dir + "/rank-0-of-7.safetensors"));
    EXPECT_FALSE(fs::exists(dir + "/.layout.json.tmp.Ab12Cd"));
  });
  comm.barrier();
  ZeroRun fresh(comm, {.stage = ZeroStage::Two, .seed = 5});
  EXPECT_EQ(load_sharded(dir, *fresh.zero, *fresh.opt).step, 2);
}

// A save replaces its directory whole: a file in its place (it was deleted) and a directory that
// is not a checkpoint are refused on every rank, and stay as they were.
inline void expect_save_refuses_what_it_would_destroy(Communicator& comm) {
  using namespace sharded;
  SharedDir tmp(comm);
  on_rank0(comm, [&] {
    write_bytes(tmp / "afile", "precious user data");
    fs::create_directories(tmp / "notes");
    write_bytes(tmp / "notes/todo.txt", "mine");
  });
  comm.barrier();
  ZeroRun run(comm, {.stage = ZeroStage::Three});
  run.steps(0, 1);
  for (const auto& [path, says] : std::vector<std::pair<std::string, std::string>>{
           {tmp / "afile", "exists and is not a directory"},
           {tmp / "notes", "is a non-empty directory that is not a zdl checkpoint (no layout.json)"}}) {
    const std::string dir = path;
    const std::string msg = error_of([&] { save_sharded(dir, *run.zero, *run.opt, run.state(1)); });
    EXPECT_NE(msg.find(says), std::string::npos) << msg;
  }
  on_rank0(comm, [&] {
    EXPECT_EQ(read_bytes(tmp / "afile"), "precious user data");
    EXPECT_EQ(read_bytes(tmp / "notes/todo.txt"), "mine");
    EXPECT_FALSE(fs::exists(tmp / ".afile.saving"));
  });
  comm.barrier();
}

// Consolidation (one process, while the others wait) writes a GPT-2 file that io::load_gpt2
// reads into a plain nn::GPT whose parameters equal the ZeRO model's (gathered) and whose
// logits equal the ZeRO model's within 1e-6. The vocabulary is padded, so the exported wte
// drops rows and the import pads them back.
inline void expect_consolidation_matches_zero_model(Communicator& comm) {
  using namespace sharded;
  SharedDir tmp(comm);
  nn::GPTConfig cfg = tiny_gpt();
  cfg.padded_vocab_size = 32;
  ZeroRun run(comm, {.stage = ZeroStage::Three}, cfg);
  run.steps(0, 2);
  save_sharded(tmp / "ckpt", *run.zero, *run.opt, run.state(2));
  const std::string out = tmp / "gpt2.safetensors";
  std::string err;
  on_rank0(comm, [&] { err = error_of([&] { consolidate_sharded(tmp / "ckpt", out); }); });
  EXPECT_EQ(err, "");

  nn::GPTConfig got = io::config_from_gpt2_file(out);  // n_head etc. from the file's metadata
  EXPECT_EQ(got.n_layer, cfg.n_layer);
  EXPECT_EQ(got.n_head, cfg.n_head);
  EXPECT_EQ(got.n_embd, cfg.n_embd);
  EXPECT_EQ(got.vocab_size, cfg.vocab_size);
  EXPECT_EQ(got.padded_vocab(), cfg.padded_vocab());
  EXPECT_EQ(got.block_size, cfg.block_size);
  std::shared_ptr<nn::GPT> plain;
  {
    nn::InitContext ctx(12345);
    plain = std::make_shared<nn::GPT>(got);
  }
  io::load_gpt2(*plain, out);
  auto header = io::read_safetensors_header(out);
  ASSERT_TRUE(header.find("h.0.attn.c_attn.weight") && header.find("wte.weight"));
  EXPECT_EQ(header.find("h.0.attn.c_attn.weight")->shape, (Shape{cfg.n_embd, 3 * cfg.n_embd}));  // Conv1D layout
  EXPECT_EQ(header.find("wte.weight")->shape, (Shape{cfg.vocab_size, cfg.n_embd}));

  auto zero_params = run.params();
  for (auto& [n, p] : plain->named_parameters()) {
    std::vector<double> want = zero_params.at(n), have = p.to(DType::F64).to_vector();
    if (n == "wte.weight") {  // the file keeps the vocab_size real rows; load_gpt2 zeroes the padding rows
      want.resize(static_cast<size_t>(cfg.vocab_size * cfg.n_embd));
      have.resize(want.size());
    }
    EXPECT_EQ(have, want) << comm.prefix() << " " << n;
  }
  RunConfig c;
  Tensor ids = global_batch(c, cfg.vocab_size, 7, 0).first;
  {
    NoGradGuard ng;
    std::vector<double> a = run.model->logits(ids).to_vector(), b = plain->logits(ids).to_vector();
    ASSERT_EQ(a.size(), b.size());
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
    EXPECT_LE(worst, 1e-6) << comm.prefix() << " logits of the consolidated model vs the ZeRO model";
  }

  // A checkpoint without the GPT config cannot be consolidated: a clear error.
  io::TrainState bare = run.state(2);
  bare.metadata.erase("config");
  save_sharded(tmp / "bare", *run.zero, *run.opt, bare);
  on_rank0(comm, [&] { err = error_of([&] { consolidate_sharded(tmp / "bare", tmp / "x.safetensors"); }); });
  if (comm.rank() == 0) {
    EXPECT_TRUE(contains(err, "metadata[\"config\"]")) << err;
  }

  // An output inside the checkpoint it reads (over layout.json, over a shard, in a subfolder,
  // through "..") is refused before anything is written: the checkpoint still loads.
  const std::string ck = tmp / "ckpt";
  for (const std::string& inside : {ck + "/layout.json", ck + "/rank-0-of-" + std::to_string(comm.size()) + ".safetensors",
                                    ck + "/sub/x.safetensors", ck + "/../ckpt/new.safetensors"}) {
    on_rank0(comm, [&] { err = error_of([&] { consolidate_sharded(ck, inside); }); });
    if (comm.rank() == 0) {
      EXPECT_TRUE(contains(err, "is inside the checkpoint directory")) << inside << ": " << err;
      EXPECT_FALSE(std::filesystem::exists(ck + "/new.safetensors"));
    }
  }
  run.steps(2, 3);  // moves the model away from the checkpoint
  EXPECT_NO_THROW(load_sharded(ck, *run.zero, *run.opt)) << comm.prefix();
  EXPECT_EQ(run.params(), zero_params) << comm.prefix() << " the checkpoint's weights, intact";
}

// ---- across world sizes (wired by ctest: the N = 4 run saves, N = 1 and 2 load) ----

// The directory the cross-world-size tests share (env ZDL_SHARDED_XWS_DIR), or "" to skip.
inline std::string cross_world_size_dir() {
  const char* d = std::getenv("ZDL_SHARDED_XWS_DIR");
  return d ? d : "";
}

inline constexpr int kCrossSavedSteps = 2, kCrossTotalSteps = 5;

// The cross-world-size run at N ranks (1, 2 or 4): 4 sequences per step in micro-batches of
// one row, with dropout: the same steps, bit for bit, at every N.
inline RunConfig cross_config(int n, ZeroStage stage, uint64_t seed = 7) {
  return {.stage = stage, .grad_accum = 4 / n, .batch = n, .dropout = 0.1, .seed = seed};
}

// Trains kCrossSavedSteps under ZeRO-3 at this world size and saves to <dir>/ckpt.
inline void save_for_other_world_sizes(Communicator& comm, const std::string& dir) {
  using namespace sharded;
  ZeroRun run(comm, cross_config(comm.size(), ZeroStage::Three));
  run.steps(0, kCrossSavedSteps);
  save_sharded(dir + "/ckpt", *run.zero, *run.opt, run.state(kCrossSavedSteps));
  EXPECT_EQ(read_sharded_train_state(dir + "/ckpt").step, kCrossSavedSteps);
}

// Loads <dir>/ckpt, saved at another world size, under every stage; the remaining steps
// follow single-process training (the reference trajectory) within tol (0: bit for bit).
inline void expect_resume_from_other_world_size(Communicator& comm, const std::string& dir, double tol) {
  using namespace sharded;
  const std::string ckpt = dir + "/ckpt";
  io::TrainState st = read_sharded_train_state(ckpt);
  EXPECT_NE(st.metadata.at("saved_by_world_size"), std::to_string(comm.size()))
      << "the checkpoint should come from another world size";
  RunConfig rc = cross_config(1, ZeroStage::DDP);
  rc.steps = kCrossTotalSteps;
  RunResult ref = run_reference(rc);
  const std::vector<double> tail(ref.losses.begin() + kCrossSavedSteps, ref.losses.end());
  for (ZeroStage stage : kAllStages) {
    ZeroRun run(comm, cross_config(comm.size(), stage, /*seed=*/99));
    io::TrainState got = load_sharded(ckpt, *run.zero, *run.opt);
    EXPECT_EQ(got.step, kCrossSavedSteps);
    EXPECT_EQ(got.data_position, kCrossSavedSteps * run.c.batch * run.c.grad_accum);
    expect_losses_near(comm, run.steps(kCrossSavedSteps, kCrossTotalSteps), tail, tol,
                       "resumed from world size " + st.metadata.at("saved_by_world_size") + " under " +
                           stage_name(stage));
    auto params = run.params();
    for (auto& [name, v] : ref.params)
      EXPECT_LE(rel_l2(params[name], v), tol) << comm.prefix() << " " << stage_name(stage) << " " << name;
  }
}

}  // namespace zdl::dist::testing

// Checkpoints: a round trip restores parameters, optimizer state, dropout counters and the
// TrainState exactly (and training continues on the same trajectory); corruption,
// truncation, a different model and a newer format are each rejected clearly; a save that
// dies halfway leaves the previous checkpoint loadable.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "autograd/grad_mode.h"
#include "core/hash.h"
#include "io/checkpoint.h"
#include "io/checkpoint_dir.h"
#include "nn/gpt.h"
#include "nn/parameter_factory.h"
#include "optim/param_groups.h"
#include "temp_dir.h"

namespace zdl::io {

namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

nn::GPTConfig tiny_config() {
  return {.vocab_size = 32, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16, .dropout = 0.1};
}

// A model and its AdamW, built the same way every time (seeded init).
struct TrainRun {
  std::shared_ptr<nn::GPT> model;
  std::unique_ptr<optim::AdamW> opt;
  explicit TrainRun(uint64_t seed, nn::GPTConfig cfg = tiny_config()) {
    nn::InitContext ctx(seed);
    model = std::make_shared<nn::GPT>(cfg);
    opt = std::make_unique<optim::AdamW>(optim::decay_groups(*model, 0.1), optim::AdamWOptions{.lr = 1e-2});
  }
  void train_step(int64_t k) {
    std::vector<int64_t> ids, tgt;
    for (int64_t i = 0; i < 2 * 8; ++i) {
      ids.push_back((i * 5 + k) % 32);
      tgt.push_back((i * 3 + k + 1) % 32);
    }
    Tensor loss = model->loss(Tensor::from_vector(ids, {2, 8}, DType::I64), Tensor::from_vector(tgt, {2, 8}, DType::I64));
    loss.backward();
    opt->step();
    opt->zero_grad();
  }
};

TrainState sample_state(int64_t step) {
  return {.step = step,
          .data_position = 123456789012345,
          .counters = {{"sampler_seed", 42}, {"shuffle_epoch", (uint64_t{1} << 63) + 5}},
          .metadata = {{"config", R"({"n_layer": 2, "n_embd": 16})"}, {"data_fingerprint", "fnv:0123abcd"}}};
}

void expect_same_params(const nn::Module& a, const nn::Module& b) {
  auto sa = a.state_dict(), sb = b.state_dict();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].first, sb[i].first);
    EXPECT_EQ(sa[i].second.to_vector(), sb[i].second.to_vector()) << sa[i].first;
  }
}

std::string state_file(const std::string& dir) { return dir + "/state.safetensors"; }

}  // namespace

TEST(Checkpoint, RoundTripRestoresEverythingAndTrainingContinuesIdentically) {
  TempDir tmp;
  const std::string dir = tmp / "ckpt";
  TrainRun a(1);
  for (int k = 0; k < 3; ++k) a.train_step(k);
  ASSERT_GT(a.model->drop->calls, 0u);
  save_checkpoint(dir, *a.model, *a.opt, sample_state(3));
  EXPECT_TRUE(fs::exists(state_file(dir)));
  EXPECT_TRUE(fs::exists(dir + "/checkpoint.json"));

  TrainRun b(2);  // different init, untouched optimizer
  TrainState st = load_checkpoint(dir, *b.model, *b.opt);
  EXPECT_EQ(st, sample_state(3));
  expect_same_params(*a.model, *b.model);
  EXPECT_EQ(b.opt->step_count(), 3);
  auto oa = a.opt->state(), ob = b.opt->state();
  ASSERT_EQ(oa.size(), ob.size());
  for (size_t i = 0; i < oa.size(); ++i) {
    EXPECT_EQ(oa[i].first, ob[i].first);
    EXPECT_EQ(oa[i].second.to_vector(), ob[i].second.to_vector()) << oa[i].first;
  }
  EXPECT_EQ(b.model->drop->calls, a.model->drop->calls);
  EXPECT_EQ(b.model->drop->seed, a.model->drop->seed);  // b was built under another init seed
  EXPECT_EQ(b.model->drop->stream, a.model->drop->stream);
  EXPECT_EQ(b.model->h[1]->attn->attn_dropout->calls, a.model->h[1]->attn->attn_dropout->calls);
  EXPECT_EQ(read_train_state(dir), sample_state(3));

  // Resuming is the same trajectory: dropout masks, Adam moments and bias corrections agree.
  a.train_step(3);
  b.train_step(3);
  expect_same_params(*a.model, *b.model);
}

TEST(Checkpoint, CorruptedOrTruncatedFilesAreRejected) {
  TempDir tmp;
  const std::string dir = tmp / "ckpt";
  TrainRun a(1);
  a.train_step(0);
  save_checkpoint(dir, *a.model, *a.opt, sample_state(1));
  const std::string good = read_bytes(state_file(dir));

  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x10;  // one bit in the tensor data
  write_bytes(state_file(dir), flipped);
  TrainRun b(2);
  std::string msg = error_of([&] { load_checkpoint(dir, *b.model, *b.opt); });
  EXPECT_NE(msg.find("state.safetensors is corrupted (FNV-1a 64 checksum"), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir), std::string::npos) << msg;

  write_bytes(state_file(dir), good.substr(0, good.size() - 100));
  msg = error_of([&] { load_checkpoint(dir, *b.model, *b.opt); });
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;

  write_bytes(dir + "/checkpoint.json", "{\"format\": \"zdl-check");
  msg = error_of([&] { load_checkpoint(dir, *b.model, *b.opt); });
  EXPECT_NE(msg.find("not a JSON object (corrupted or truncated?)"), std::string::npos) << msg;

  // A format field of another JSON type (json's value() would throw its own type_error).
  write_bytes(dir + "/checkpoint.json", "{\"format\": 7, \"format_version\": 1}");
  msg = error_of([&] { load_checkpoint(dir, *b.model, *b.opt); });
  EXPECT_NE(msg.find("is not a zdl checkpoint (format=7)"), std::string::npos) << msg;

  fs::remove_all(dir);
  msg = error_of([&] { load_checkpoint(dir, *b.model, *b.opt); });
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
}

// The file checksum is FNV-1a 64 over every byte: one flipped at the start, at the end of the
// first 1 MiB read chunk or at the very end changes it (the test above flips a middle one).
TEST(Checkpoint, FileChecksumCoversEveryByte) {
  TempDir tmp;
  const std::string path = tmp / "bytes";
  std::string bytes((size_t{1} << 20) + 3, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 131 % 251);
  write_bytes(path, bytes);
  const uint64_t whole = fnv1a64(bytes);
  EXPECT_EQ(fnv1a64_file(path), whole);
  for (size_t at : {size_t{0}, (size_t{1} << 20) - 1, bytes.size() - 1}) {
    std::string flipped = bytes;
    flipped[at] ^= 0x01;
    write_bytes(path, flipped);
    EXPECT_NE(fnv1a64_file(path), whole) << "byte " << at;
  }
}

TEST(Checkpoint, NewerFormatVersionIsRejected) {
  TempDir tmp;
  const std::string dir = tmp / "ckpt";
  TrainRun a(1);
  save_checkpoint(dir, *a.model, *a.opt, sample_state(0));
  std::string manifest = read_bytes(dir + "/checkpoint.json");
  const std::string v1 = "\"format_version\": 1";
  ASSERT_NE(manifest.find(v1), std::string::npos) << manifest;
  manifest.replace(manifest.find(v1), v1.size(), "\"format_version\": 7");
  write_bytes(dir + "/checkpoint.json", manifest);
  TrainRun b(2);
  std::string msg = error_of([&] { load_checkpoint(dir, *b.model, *b.opt); });
  EXPECT_NE(msg.find("has format_version 7, newer than the version 1 this build reads"), std::string::npos) << msg;
  EXPECT_NE(error_of([&] { read_train_state(dir); }).find("format_version 7"), std::string::npos);
}

TEST(Checkpoint, ADifferentModelIsRejectedBeforeAnythingChanges) {
  TempDir tmp;
  const std::string dir = tmp / "ckpt";
  TrainRun a(1);
  a.train_step(0);
  save_checkpoint(dir, *a.model, *a.opt, sample_state(1));

  auto cfg = tiny_config();
  cfg.n_layer = 3;
  cfg.n_embd = 32;
  TrainRun other(2, cfg);
  auto before = other.model->wpe->weight.to_vector();
  std::string msg = error_of([&] { load_checkpoint(dir, *other.model, *other.opt); });
  EXPECT_NE(msg.find("was saved from a different model or optimizer"), std::string::npos) << msg;
  EXPECT_NE(msg.find("wpe.weight (expected [8,32], got [8,16])"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing: h.2.ln_1.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing: optim.h.2.ln_1.weight.exp_avg"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing dropout state: h.2.attn.attn_dropout"), std::string::npos) << msg;
  EXPECT_EQ(other.model->wpe->weight.to_vector(), before);
  EXPECT_EQ(other.opt->step_count(), 0);

  // Same model, different optimizer (SGD keeps "momentum", not Adam's moments).
  TrainRun same(3);
  optim::SGD sgd(optim::decay_groups(*same.model, 0.0), {.lr = 0.1, .momentum = 0.9});
  msg = error_of([&] { load_checkpoint(dir, *same.model, sgd); });
  EXPECT_NE(msg.find("missing: optim.wte.weight.momentum"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unexpected: optim.wte.weight.exp_avg"), std::string::npos) << msg;
}

TEST(Checkpoint, ACrashDuringSaveLeavesThePreviousCheckpointLoadable) {
  TempDir tmp;
  const std::string dir = tmp / "ckpt";
  TrainRun a(1);
  a.train_step(0);
  save_checkpoint(dir, *a.model, *a.opt, sample_state(1));
  auto saved = a.model->state_dict();
  std::vector<std::vector<double>> saved_values;
  for (auto& [n, t] : saved) saved_values.push_back(t.to_vector());

  // 1. The process died while writing the next one: a half-written staging directory and a
  //    half-written temporary file are left behind.
  a.train_step(1);
  fs::create_directory(tmp / ".ckpt.saving");
  write_bytes(tmp / ".ckpt.saving/state.safetensors", "\x10\x00\x00\x00garbage");
  write_bytes(tmp / ".ckpt.saving/.checkpoint.json.tmp.abc123", "{\"format\":");
  TrainRun b(2);
  EXPECT_EQ(load_checkpoint(dir, *b.model, *b.opt).step, 1);
  auto loaded = b.model->state_dict();
  for (size_t i = 0; i < loaded.size(); ++i) EXPECT_EQ(loaded[i].second.to_vector(), saved_values[i]);

  // 2. A save that fails halfway through writing tensors (here: a parameter whose storage
  //    was released, as a ZeRO-3 shard outside its gather) throws and changes nothing.
  {
    TrainRun c(5);
    c.model->h[1]->mlp->c_fc->weight.storage()->release();
    std::string msg = error_of([&] { save_checkpoint(dir, *c.model, *c.opt, sample_state(99)); });
    EXPECT_FALSE(msg.empty());
  }
  EXPECT_EQ(read_train_state(dir).step, 1);
  TrainRun d(3);
  EXPECT_EQ(load_checkpoint(dir, *d.model, *d.opt).step, 1);
  expect_same_params(*b.model, *d.model);

  // 3. The next save cleans up the debris and replaces the checkpoint.
  save_checkpoint(dir, *a.model, *a.opt, sample_state(2));
  EXPECT_FALSE(fs::exists(tmp / ".ckpt.saving"));
  TrainRun e(4);
  EXPECT_EQ(load_checkpoint(dir, *e.model, *e.opt).step, 2);
  expect_same_params(*a.model, *e.model);

  // 4. Interrupted between the two renames of the no-RENAME_EXCHANGE fallback: only the
  //    ".old" backup exists; load finds it.
  fs::rename(dir, tmp / ".ckpt.old");
  TrainRun f(6);
  EXPECT_EQ(load_checkpoint(dir, *f.model, *f.opt).step, 2);
  save_checkpoint(dir, *a.model, *a.opt, sample_state(3));
  EXPECT_FALSE(fs::exists(tmp / ".ckpt.old"));
  EXPECT_EQ(read_train_state(dir).step, 3);
  int entries = 0;
  for (auto& it : fs::directory_iterator(tmp.path())) entries += it.path().filename() == "ckpt" ? 1 : 100;
  EXPECT_EQ(entries, 1);  // nothing but the checkpoint is left
}

TEST(Checkpoint, FileSystemFailuresAreZdlErrors) {
  TempDir tmp;
  write_bytes(tmp / "not_a_dir", "x");
  TrainRun a(1);
  std::string msg = error_of([&] { save_checkpoint(tmp / "not_a_dir/ckpt", *a.model, *a.opt, sample_state(0)); });
  EXPECT_NE(msg.find("save_checkpoint('" + (tmp / "not_a_dir/ckpt") + "')"), std::string::npos) << msg;
}

// A save replaces its directory whole. Called from a program of one's own (train_gpt checks its
// --save at startup), it used to delete a file in the checkpoint's place, and to link the
// working directory's entries (or the filesystem root's, for "/") into its staging directory.
TEST(Checkpoint, ASaveRefusesWhatItWouldDestroyAndTouchesNothing) {
  TempDir tmp;
  write_bytes(tmp / "afile", "precious user data");
  fs::create_directory(tmp / "notes");
  write_bytes(tmp / "notes/todo.txt", "mine");
  TrainRun a(1);
  const std::string cwd = fs::current_path().string();
  for (const auto& [path, says] : std::vector<std::pair<std::string, std::string>>{
           {tmp / "afile", "exists and is not a directory"},
           {tmp / "notes", "is a non-empty directory that is not a zdl checkpoint (no checkpoint.json)"},
           {"", "the working directory"},
           {".", "the working directory"},
           {"/", "above the working directory"}}) {
    const std::string dir = path;
    const std::string msg = error_of([&] { save_checkpoint(dir, *a.model, *a.opt, sample_state(0)); });
    EXPECT_NE(msg.find(says), std::string::npos) << "'" << dir << "': " << msg;
  }
  EXPECT_EQ(read_bytes(tmp / "afile"), "precious user data");
  EXPECT_EQ(read_bytes(tmp / "notes/todo.txt"), "mine");
  std::vector<std::string> left;
  for (auto& e : fs::directory_iterator(tmp.path())) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"afile", "notes"}));  // no staging debris
  for (const char* debris : {"/..saving", "/.zdl-save-probe"}) EXPECT_FALSE(fs::exists(debris)) << debris;
  EXPECT_EQ(fs::current_path().string(), cwd);
}

// A save replaces the checkpoint's files inside the directory: one this user cannot write
// (chmod 555) is refused by the startup check, a writable one passes. Root writes anywhere, so
// as root the check runs as user nobody (effective uid only; it comes back after).
TEST(CheckpointDir, AnUnwritableCheckpointDirectoryIsRefusedByTheStartupCheck) {
  namespace fs = std::filesystem;
  TempDir tmp;
  fs::permissions(tmp.path(), fs::perms::all);  // nobody may enter (and write) here
  fs::create_directory(tmp / "ro");
  fs::create_directory(tmp / "rw");
  write_bytes(tmp / "ro/layout.json", "{}");
  write_bytes(tmp / "rw/layout.json", "{}");
  fs::permissions(tmp / "ro", fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                                  fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec);
  fs::permissions(tmp / "rw", fs::perms::all);
  const bool root = ::geteuid() == 0;
  if (root) ASSERT_EQ(::seteuid(65534), 0) << "root could not take an unprivileged effective uid";
  const std::string refused = error_of([&] { check_checkpoint_destination(tmp / "ro", "layout.json"); });
  const std::string accepted = error_of([&] { check_checkpoint_destination(tmp / "rw", "layout.json"); });
  if (root) ASSERT_EQ(::seteuid(0), 0);
  EXPECT_NE(refused.find("the checkpoint directory '" + (tmp / "ro") + "' is not writable (Permission denied)"),
            std::string::npos)
      << refused;
  EXPECT_EQ(accepted, "");
  fs::permissions(tmp / "ro", fs::perms::owner_all);  // so the temporary directory can go
}

}  // namespace zdl::io

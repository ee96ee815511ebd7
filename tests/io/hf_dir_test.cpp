// Hugging Face directories: config.json is read and checked field by field against the weights
// and zerodl's GPT; an export writes the pair together (a kill at any moment leaves a pair that
// agrees), keeps the directory's other files and clears a killed export's debris; destinations
// are checked before any work (a file in the path, no room, another writer).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "autograd/grad_mode.h"
#include "io/dir_lock.h"
#include "io/hf_dir.h"
#include "lock_holder_process.h"
#include "nn/parameter_factory.h"
#include "temp_dir.h"

namespace zdl::io {

namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

nn::GPTConfig config(int64_t n_layer, int64_t n_embd = 16) {
  return {.vocab_size = 50, .block_size = 16, .n_layer = n_layer, .n_head = 2, .n_embd = n_embd};
}

std::shared_ptr<nn::GPT> make_gpt(const nn::GPTConfig& cfg, uint64_t seed) {
  nn::InitContext ctx(seed);
  return std::make_shared<nn::GPT>(cfg);
}

// The directory's config.json with one edit applied.
void edit_config(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  const std::string path = dir + "/config.json";
  nlohmann::json j = nlohmann::json::parse(read_bytes(path));
  edit(j);
  write_bytes(path, j.dump());
}

}  // namespace

TEST(HfDir, ConfigJsonGivesTheModelAndEveryFieldIsChecked) {
  TempDir tmp;
  const std::string good = tmp / "good";
  export_hf_dir(*make_gpt(config(2), 1), good);
  const nn::GPTConfig read = config_from_hf_dir(good);
  EXPECT_EQ(read.n_layer, 2);
  EXPECT_EQ(read.n_head, 2);
  EXPECT_EQ(read.n_embd, 16);
  EXPECT_EQ(read.block_size, 16);
  EXPECT_EQ(read.vocab_size, 50);
  // The model's dropout rate is the config's (it said 0.0 after training with --dropout 0.2).
  nn::GPTConfig dropped = config(2);
  dropped.dropout = 0.2;
  const nlohmann::json written = nlohmann::json::parse(hf_gpt2_config_json(dropped));
  for (const char* key : {"resid_pdrop", "embd_pdrop", "attn_pdrop"}) EXPECT_EQ(written.at(key), 0.2) << key;

  // Each edit, and the text the error must hold. Every field that changes the function is read.
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> edits = {
      {[](auto& j) { j["n_embd"] = 128; }, "n_embd=128"},
      {[](auto& j) { j["n_layer"] = 1000000000; }, "n_layer=1000000000"},
      {[](auto& j) { j["n_layer"] = 1e9; }, "n_layer must be an integer"},
      {[](auto& j) { j["n_head"] = 3; }, "n_head=3"},  // the weights record 2
      {[](auto& j) { j["n_head"] = 0; }, "n_head=0"},
      {[](auto& j) { j["n_positions"] = 1024; }, "n_positions=1024"},
      {[](auto& j) { j["n_ctx"] = 1024; }, "n_ctx=1024"},
      {[](auto& j) { j["vocab_size"] = 50257; }, "vocab_size=50257"},
      {[](auto& j) { j["activation_function"] = "relu"; }, "activation_function=\"relu\""},
      {[](auto& j) { j["layer_norm_epsilon"] = 0.5; }, "layer_norm_epsilon=0.5"},
      {[](auto& j) { j["layer_norm_epsilon"] = "1e-5"; }, "layer_norm_epsilon=\"1e-5\""},
      {[](auto& j) { j["tie_word_embeddings"] = false; }, "tie_word_embeddings=false"},
      {[](auto& j) { j["n_inner"] = 7; }, "n_inner=7"},
      {[](auto& j) { j["model_type"] = "bert"; }, "model_type=\"bert\""},
      {[](auto& j) { j["architectures"] = {"LlamaForCausalLM"}; }, "architectures=[\"LlamaForCausalLM\"]"},
      {[](auto& j) { j["scale_attn_weights"] = false; }, "scale_attn_weights=false"},
      {[](auto& j) { j["scale_attn_by_inverse_layer_idx"] = true; }, "scale_attn_by_inverse_layer_idx=true"},
      {[](auto& j) { j.erase("n_head"); }, "lacks \"n_head\""},
      {[](auto& j) { j.erase("n_embd"); }, "lacks \"n_embd\""},
      {[](auto& j) { j.erase("vocab_size"); }, "lacks \"vocab_size\""},
      {[](auto& j) { j = nlohmann::json::array(); }, "not a JSON object"},
  };
  for (size_t i = 0; i < edits.size(); ++i) {
    const std::string dir = tmp / ("edit" + std::to_string(i));
    fs::copy(good, dir);
    edit_config(dir, edits[i].first);
    const std::string e = error_of([&] { config_from_hf_dir(dir); });
    EXPECT_NE(e.find(edits[i].second), std::string::npos) << "edit " << i << ": " << e;
    EXPECT_NE(e.find(dir), std::string::npos) << "names the directory: " << e;
  }
  // What transformers also accepts: the alias of GELU's tanh form, no n_inner, absent optional keys.
  const std::string same = tmp / "same";
  fs::copy(good, same);
  edit_config(same, [](auto& j) {
    j["activation_function"] = "gelu_pytorch_tanh";
    j.erase("n_inner");
    j.erase("tie_word_embeddings");
    j.erase("layer_norm_epsilon");
    j.erase("n_ctx");
  });
  EXPECT_EQ(config_from_hf_dir(same).n_layer, 2);

  const std::string no_config = tmp / "no_config";
  fs::copy(good, no_config);
  fs::remove(no_config + "/config.json");
  EXPECT_NE(error_of([&] { config_from_hf_dir(no_config); }).find("no config.json"), std::string::npos);
}

TEST(HfDir, AnExportKeepsOtherFilesAndClearsTheDebrisOfAKilledOne) {
  TempDir tmp;
  const std::string dir = tmp / "hf";
  export_hf_dir(*make_gpt(config(1), 1), dir);
  write_bytes(dir + "/NOTES.txt", "tokenizer from run 3\n");
  fs::create_directory(dir + "/eval");
  write_bytes(dir + "/eval/val.json", "{}\n");
  // What a killed export left: a temporary inside (an export by an older writer) and a staging
  // directory next to it.
  write_bytes(dir + "/.model.safetensors.tmp.Ab12Cd", std::string(1000, 'x'));
  fs::create_directory(tmp / ".hf.saving");
  write_bytes(tmp / ".hf.saving/model.safetensors", "half");

  export_hf_dir(*make_gpt(config(2), 2), dir);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"NOTES.txt", "config.json", "eval", "model.safetensors"}));
  EXPECT_EQ(read_bytes(dir + "/NOTES.txt"), "tokenizer from run 3\n");
  EXPECT_EQ(read_bytes(dir + "/eval/val.json"), "{}\n");
  EXPECT_FALSE(fs::exists(tmp / ".hf.saving")) << "the staging directory of the killed export";
  EXPECT_FALSE(fs::exists(tmp / ".hf.lock")) << "the lock goes with the export";
  EXPECT_EQ(config_from_hf_dir(dir).n_layer, 2);
}

// An export killed at any moment leaves either the previous pair or the new one, never new
// weights under an old config.json.
TEST(HfDir, AKilledExportLeavesAPairThatAgrees) {
  TempDir tmp;
  const std::string dir = tmp / "hf";
  // Models of two shapes, large enough that an export takes a few milliseconds.
  export_hf_dir(*make_gpt(config(1, 128), 1), dir);
  for (int trial = 0; trial < 24; ++trial) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      for (int i = 0;; ++i) export_hf_dir(*make_gpt(config(1 + (i + trial) % 2, 128), 1), dir);
    }
    ::usleep(static_cast<useconds_t>(2000 + 3000 * trial));
    ::kill(child, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    const std::string e = error_of([&] {
      const nn::GPTConfig cfg = config_from_hf_dir(dir);
      auto m = make_gpt(cfg, 3);
      load_gpt2(*m, dir + "/model.safetensors");
    });
    ASSERT_EQ(e, "") << "trial " << trial;
  }
}

TEST(HfDir, ADestinationIsCheckedBeforeAnyWork) {
  TempDir tmp;
  const std::string file = tmp.write("afile", "x");
  std::string e = error_of([&] { check_hf_dir_destination(file + "/sub"); });
  EXPECT_NE(e.find("'" + file + "' is a file, not a directory (in '" + file + "/sub')"), std::string::npos) << e;
  e = error_of([&] { check_hf_dir_destination(file); });
  EXPECT_NE(e.find("is a file, not a directory"), std::string::npos) << e;
  e = error_of([&] { check_hf_dir_destination(tmp / "no/such/hf"); });
  EXPECT_NE(e.find("does not exist"), std::string::npos) << e;
  EXPECT_EQ(error_of([&] { check_hf_dir_destination(tmp / "hf", 1 << 20); }), "");
  // More than any disk holds: refused naming the free space.
  e = error_of([&] { check_hf_dir_destination(tmp / "hf", int64_t{1} << 62); });
  EXPECT_NE(e.find("MB free"), std::string::npos) << e;
  EXPECT_NE(e.find("needs"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(tmp / "hf")) << "a check writes nothing";
}

// An export replaces its directory whole: what it may replace is checked first, a link is
// followed to the directory it names, and the directory keeps its mode and owner.
TEST(HfDir, WhatAnExportReplacesIsChecked) {
  TempDir tmp;
  for (const std::string bad : {"/", "/.", "."}) {
    const std::string e = error_of([&] { check_hf_dir_destination(bad); });
    EXPECT_NE(e.find("names no directory an export can replace"), std::string::npos) << bad << ": " << e;
  }
  // A project folder (files, no export or checkpoint in it) is refused; an export or a
  // checkpoint directory with other files beside it is not.
  fs::create_directory(tmp / "project");
  write_bytes(tmp / "project/main.cpp", "int main() {}\n");
  std::string e = error_of([&] { check_hf_dir_destination(tmp / "project"); });
  EXPECT_NE(e.find("is a non-empty directory that is neither a model export"), std::string::npos) << e;
  e = error_of([&] { export_hf_dir(*make_gpt(config(1), 1), tmp / "project"); });
  EXPECT_NE(e.find("non-empty directory"), std::string::npos) << e;
  EXPECT_EQ(read_bytes(tmp / "project/main.cpp"), "int main() {}\n");
  fs::create_directory(tmp / "ck");
  write_bytes(tmp / "ck/layout.json", "{}");
  EXPECT_EQ(error_of([&] { check_hf_dir_destination(tmp / "ck"); }), "");

  // A link: the export goes to the directory it names, and the link stays a link.
  const std::string target = tmp / "models/hf";
  fs::create_directories(target);
  fs::create_directory_symlink(target, tmp / "latest");
  EXPECT_EQ(check_hf_dir_destination(tmp / "latest"), fs::canonical(target).string());
  export_hf_dir(*make_gpt(config(2), 1), tmp / "latest");
  EXPECT_TRUE(fs::is_symlink(tmp / "latest"));
  EXPECT_EQ(config_from_hf_dir(target).n_layer, 2);
  fs::create_directory_symlink(tmp / "nowhere", tmp / "dangling");
  e = error_of([&] { check_hf_dir_destination(tmp / "dangling"); });
  EXPECT_NE(e.find("is a symbolic link to a place that does not exist"), std::string::npos) << e;

  // A private directory stays private; a setgid group directory keeps its bit.
  const std::string priv = tmp / "priv";
  fs::create_directory(priv);
  ASSERT_EQ(::chmod(priv.c_str(), 02700), 0);
  export_hf_dir(*make_gpt(config(1), 1), priv);
  export_hf_dir(*make_gpt(config(1), 2), priv);
  struct stat st {};
  ASSERT_EQ(::stat(priv.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 02700u);
}

TEST(HfDir, AnotherProcessExportingToTheSameDirectoryIsRefused) {
  TempDir tmp;
  const std::string dir = tmp / "hf";
  {
    testing::LockHolderProcess other(dir);
    const std::string e = error_of([&] { export_hf_dir(*make_gpt(config(1), 1), dir); });
    EXPECT_NE(e.find("is in use by another run"), std::string::npos) << e;
    EXPECT_FALSE(fs::exists(dir));
  }
  // This process holding the lock itself (train_gpt holds --export-hf's for its whole run).
  DirLock mine(dir);
  export_hf_dir(*make_gpt(config(1), 1), dir);
  EXPECT_EQ(config_from_hf_dir(dir).n_layer, 1);
}

}  // namespace zdl::io

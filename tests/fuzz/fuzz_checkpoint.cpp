// libFuzzer target: the JSON files of checkpoints. Each input is written as
//   - the layout.json of a sharded checkpoint: dist::read_sharded_train_state, then
//     dist::consolidate_sharded (indexes the pieces, parses the GPT config in the metadata,
//     checks shapes, opens and reads rank files) and dist::load_sharded into a live ZeRO-3
//     model (checks names/shapes against the model, reads this rank's ranges);
//   - the checkpoint.json of a single-file checkpoint: io::read_train_state, then
//     io::load_checkpoint into a live GPT + AdamW ("files" sizes/checksums, "dropout").
// Both directories hold real tensor files, saved once at start-up from a tiny GPT (the seeds
// layout_gpt_ws1.json / checkpoint_gpt.json are those saves' JSON). Byte-exact mutations
// almost never keep the recorded size and FNV-1a checksum of a tensor file, so every input
// that parses as JSON is also tried a second time with those two fields set to the real
// values: the code behind the integrity checks (pieces meeting file headers, element ranges,
// the GPT config, dropout state) sees hostile values too. Every call must return or throw
// zdl::Error: no crash, no overflow (UBSan), no unchecked allocation.
//
//   ZDL_FUZZ_WRITE_SEEDS=tests/fuzz/corpus/checkpoint build-fuzz/tests/fuzz/fuzz_checkpoint -runs=0
//   rewrites those two seeds (after a change of the checkpoint formats or of the model).
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/check.h"
#include "dist/comm/local_communicator.h"
#include "dist/checkpoint/sharded_checkpoint.h"
#include "dist/zero/partitioner.h"
#include "dist/zero/zero_adamw.h"
#include "fuzz/fuzz_common.h"
#include "io/checkpoint.h"
#include "io/checkpoint_dir.h"
#include "io/json_fields.h"
#include "nn/gpt.h"
#include "nn/parameter_factory.h"
#include "optim/optimizer.h"
#include "optim/param_groups.h"

using namespace zdl;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// The smallest GPT with every kind of parameter, and dropout (so the manifest has state for it).
nn::GPTConfig tiny_gpt(double dropout) {
  return {.vocab_size = 16, .block_size = 4, .n_layer = 1, .n_head = 1, .n_embd = 4, .dropout = dropout};
}

std::string config_json(const nn::GPTConfig& c) {
  return json{{"vocab_size", c.vocab_size}, {"padded_vocab_size", c.padded_vocab_size}, {"block_size", c.block_size},
              {"n_layer", c.n_layer},       {"n_head", c.n_head},                       {"n_embd", c.n_embd},
              {"dropout", c.dropout}}
      .dump();
}

struct Fixture {
  std::string sharded_dir, single_dir, consolidated;
  // ZeRO-3 on one rank, the model the sharded checkpoint was saved from (loads go back into it).
  std::unique_ptr<dist::ZeroPartitioner> zero;
  std::shared_ptr<nn::GPT> zero_model;
  std::unique_ptr<dist::ZeroAdamW> zero_opt;
  // A plain model and optimizer for the single-file checkpoint.
  std::shared_ptr<nn::GPT> model;
  std::unique_ptr<optim::AdamW> opt;

  Fixture() {
    sharded_dir = fuzz::scratch_dir() + "/sharded";
    single_dir = fuzz::scratch_dir() + "/single";
    consolidated = fuzz::scratch_dir() + "/consolidated.safetensors";

    const nn::GPTConfig zcfg = tiny_gpt(0.0);
    zero = std::make_unique<dist::ZeroPartitioner>(std::make_shared<dist::LocalCommunicator>(),
                                                   dist::ZeroOptions{.stage = dist::ZeroStage::Three});
    {
      auto scope = zero->placement_scope(1234);
      zero_model = std::make_shared<nn::GPT>(zcfg);
    }
    zero->wrap(*zero_model);
    zero_opt = std::make_unique<dist::ZeroAdamW>(*zero, optim::AdamWOptions{}, 0.1);
    dist::save_sharded(sharded_dir, *zero, *zero_opt,
                       {.step = 1, .data_position = 64, .metadata = {{"config", config_json(zcfg)}}});

    const nn::GPTConfig cfg = tiny_gpt(0.1);
    {
      nn::InitContext ctx(1234);
      model = std::make_shared<nn::GPT>(cfg);
    }
    opt = std::make_unique<optim::AdamW>(optim::decay_groups(*model, 0.1), optim::AdamWOptions{});
    io::save_checkpoint(single_dir, *model, *opt,
                        {.step = 1, .data_position = 64, .counters = {{"seed", 7}},
                         .metadata = {{"config", config_json(cfg)}}});

    if (const char* seeds = std::getenv("ZDL_FUZZ_WRITE_SEEDS")) {
      fs::copy_file(fs::path(sharded_dir) / "layout.json", fs::path(seeds) / "layout_gpt_ws1.json",
                    fs::copy_options::overwrite_existing);
      fs::copy_file(fs::path(single_dir) / "checkpoint.json", fs::path(seeds) / "checkpoint_gpt.json",
                    fs::copy_options::overwrite_existing);
    }
  }
};

// The size and checksum fields of `entry` set to those of `dir`/`name`, if that is a plain
// file name of a file there (other than the JSON itself). Returns whether anything changed.
bool fix_integrity(json& entry, const std::string& dir, const std::string& name, const char* json_file) {
  if (!entry.is_object() || name.empty() || name == json_file || name.find('/') != std::string::npos ||
      name == "." || name == "..")
    return false;
  const fs::path p = fs::path(dir) / name;
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) return false;
  const json bytes = static_cast<uint64_t>(fs::file_size(p));
  const json sum = io::hex64(io::fnv1a64_file(p.string()));
  if (entry.contains("bytes") && entry["bytes"] == bytes && entry.contains("fnv1a64") && entry["fnv1a64"] == sum)
    return false;
  entry["bytes"] = bytes;
  entry["fnv1a64"] = sum;
  return true;
}

// The input with the integrity fields of the tensor files it names made right, re-serialized;
// nothing when it is not a JSON object or names no such file.
std::optional<std::string> with_real_integrity(const uint8_t* data, size_t size, bool sharded, const std::string& dir) {
  json j = json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("files")) return std::nullopt;
  json& files = j["files"];
  bool changed = false;
  if (sharded && files.is_array()) {
    for (json& f : files)
      if (f.is_object() && f.contains("name") && f["name"].is_string())
        changed |= fix_integrity(f, dir, f["name"].get<std::string>(), "layout.json");
    // The train state's checksum too, when its fields have their types (to reach past it). The
    // library's checked readers, since json's get<int64_t>() of a huge double is undefined.
    try {
      io::TrainState st{.step = io::json_integer<int64_t>(j.at("step"), "step"),
                        .data_position = io::json_integer<int64_t>(j.at("data_position"), "data_position"),
                        .counters = io::json_integer_map<uint64_t>(j.at("counters"), "counters"),
                        .metadata = j.at("metadata").get<std::map<std::string, std::string>>()};
      const std::string sum =
          dist::train_state_checksum(st, io::json_integer<int64_t>(j.at("optimizer_step"), "optimizer_step"));
      if (!(j.contains("train_state_fnv1a64") && j["train_state_fnv1a64"] == sum)) {
        j["train_state_fnv1a64"] = sum;
        changed = true;
      }
    } catch (const json::exception&) {
    } catch (const Error&) {
    }
  } else if (!sharded && files.is_object()) {
    for (auto it = files.begin(); it != files.end(); ++it) changed |= fix_integrity(*it, dir, it.key(), "checkpoint.json");
  }
  if (!changed) return std::nullopt;
  try {
    return j.dump();
  } catch (const json::exception&) {  // a string that is not UTF-8
    return std::nullopt;
  }
}

template <class F>
void expect_return_or_error(F&& f) {
  try {
    f();
  } catch (const Error&) {
  }
}

void write(const std::string& path, const std::string& text) {
  fuzz::write_file(path, reinterpret_cast<const uint8_t*>(text.data()), text.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture fx;
  const std::string layout = fx.sharded_dir + "/layout.json", manifest = fx.single_dir + "/checkpoint.json";

  fuzz::write_file(layout, data, size);
  expect_return_or_error([&] { dist::read_sharded_train_state(fx.sharded_dir); });
  expect_return_or_error([&] { dist::consolidate_sharded(fx.sharded_dir, fx.consolidated); });
  expect_return_or_error([&] { dist::load_sharded(fx.sharded_dir, *fx.zero, *fx.zero_opt); });
  if (auto fixed = with_real_integrity(data, size, /*sharded=*/true, fx.sharded_dir)) {
    write(layout, *fixed);
    expect_return_or_error([&] { dist::consolidate_sharded(fx.sharded_dir, fx.consolidated); });
    expect_return_or_error([&] { dist::load_sharded(fx.sharded_dir, *fx.zero, *fx.zero_opt); });
  }

  fuzz::write_file(manifest, data, size);
  expect_return_or_error([&] { io::read_train_state(fx.single_dir); });
  expect_return_or_error([&] { io::load_checkpoint(fx.single_dir, *fx.model, *fx.opt); });
  if (auto fixed = with_real_integrity(data, size, /*sharded=*/false, fx.single_dir)) {
    write(manifest, *fixed);
    expect_return_or_error([&] { io::load_checkpoint(fx.single_dir, *fx.model, *fx.opt); });
  }
  return 0;
}

#include "io/checkpoint.h"

#include <array>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "core/hash.h"
#include "io/checkpoint_dir.h"
#include "io/file.h"
#include "io/json_fields.h"
#include "io/safetensors.h"
#include "nn/layers.h"

namespace zdl::io {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kStateFile = "state.safetensors";
constexpr const char* kManifestFile = "checkpoint.json";
constexpr const char* kOptimPrefix = "optim.";
constexpr uint64_t kMaxManifestBytes = 64ull << 20;




std::map<std::string, nn::Dropout*> dropout_modules(const nn::Module& model) {
  std::map<std::string, nn::Dropout*> out;
  for (auto& [name, m] : model.named_modules(/*include_self=*/true))
    if (auto* d = dynamic_cast<nn::Dropout*>(m.get())) out[name.empty() ? "." : name] = d;
  return out;
}


json read_manifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / kManifestFile).string();
  ZDL_CHECK(fs::exists(path), "checkpoint '", dir, "' has no ", kManifestFile, " (not a zdl checkpoint?)");
  InputFile f(path);
  ZDL_CHECK(f.size() <= kMaxManifestBytes, "checkpoint manifest '", path, "' is ", f.size(),
            " bytes, more than the ", kMaxManifestBytes, " allowed (corrupted?)");
  std::string text(f.size(), '\0');
  f.read_exact(0, text.data(), text.size(), "the manifest");
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  ZDL_CHECK(!j.is_discarded() && j.is_object(), "checkpoint manifest '", path,
            "' is not a JSON object (corrupted or truncated?)");
  ZDL_CHECK(j.contains("format") && j["format"] == "zdl-checkpoint", "checkpoint manifest '", path,
            "' is not a zdl checkpoint (format=", j.contains("format") ? json_shown(j["format"]) : "missing", ")");
  ZDL_CHECK(j.contains("format_version") && j["format_version"].is_number_integer(), "checkpoint manifest '", path,
            "' has no integer format_version");
  const int64_t v = json_integer<int64_t>(j["format_version"], "format_version");
  ZDL_CHECK(v <= kCheckpointFormatVersion, "checkpoint '", dir, "' has format_version ", v,
            ", newer than the version ", kCheckpointFormatVersion, " this build reads: load it with a newer zdl");
  ZDL_CHECK(v >= 1, "checkpoint manifest '", path, "' has invalid format_version ", v);
  return j;
}

TrainState state_from_manifest(const json& j, const std::string& dir) {
  TrainState st;
  try {
    st.step = json_integer<int64_t>(j.at("step"), "step");
    st.data_position = json_integer<int64_t>(j.at("data_position"), "data_position");
    st.counters = json_integer_map<uint64_t>(j.at("counters"), "counters");
    st.metadata = j.at("metadata").get<std::map<std::string, std::string>>();
  } catch (const json::exception& e) {
    ZDL_CHECK(false, "checkpoint '", dir, "': ", kManifestFile, " has a missing or mistyped field: ", e.what());
  }
  return st;
}

}  // namespace

uint64_t fnv1a64_file(const std::string& path) {
  InputFile f(path);
  uint64_t h = kFnv1aOffset;
  std::vector<unsigned char> buf(1 << 20);
  for (uint64_t off = 0; off < f.size();) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), f.size() - off));
    f.read_exact(off, buf.data(), n, "bytes to checksum");
    h = fnv1a64(buf.data(), n, h);
    off += n;
  }
  return h;
}

namespace {


void save_checkpoint_impl(const std::string& dir, const nn::Module& model, const optim::Optimizer& optimizer,
                          const TrainState& state) {
  NamedTensors tensors;
  for (auto& [n, t] : model.state_dict()) {
    ZDL_CHECK(n.rfind(kOptimPrefix, 0) != 0, "save_checkpoint('", dir, "'): model tensor '", n,
              "' collides with the optimizer's '", kOptimPrefix, "' prefix");
    tensors.emplace_back(n, t);
  }
  for (auto& [n, t] : optimizer.state()) tensors.emplace_back(kOptimPrefix + n, t);

  // A save replaces `dir` whole: a file there (it was deleted), the working directory or one
  // above it ("", ".", "/": their entries were linked into the staging directory), or a
  // directory that is not a checkpoint is refused before anything is written.
  try {
    check_checkpoint_destination(dir, kManifestFile);
  } catch (const Error& e) {
    throw Error("save_checkpoint('" + dir + "'): " + without_code_location(e.what()));
  }
  prepare_staging(dir);
  const std::string saving = checkpoint_sibling(dir, ".saving");

  const std::string state_path = (fs::path(saving) / kStateFile).string();
  save_safetensors(state_path, tensors, {{"format", "zdl-checkpoint"}});
  json m;
  m["format"] = "zdl-checkpoint";
  m["format_version"] = kCheckpointFormatVersion;
  m["step"] = state.step;
  m["data_position"] = state.data_position;
  m["counters"] = state.counters;
  m["metadata"] = state.metadata;
  json drop = json::object();
  for (auto& [n, d] : dropout_modules(model)) drop[n] = {{"seed", d->seed}, {"stream", d->stream}, {"calls", d->calls}};
  m["dropout"] = drop;
  // Checksummed from the disk, not from memory: it covers what a later load will read.
  m["files"][kStateFile] = {{"bytes", fs::file_size(state_path)}, {"fnv1a64", hex64(fnv1a64_file(state_path))}};
  std::string text = m.dump(2) + "\n";
  AtomicFileWriter w((fs::path(saving) / kManifestFile).string());
  w.write(text.data(), text.size());
  w.commit();  // also fsyncs `saving`

  swap_into_place(dir, [](const std::string& name) { return name == kStateFile || name == kManifestFile; });
}

TrainState load_checkpoint_impl(const std::string& dir, nn::Module& model, optim::Optimizer& optimizer) {
  const std::string d = resolve_checkpoint_dir(dir, kManifestFile, "checkpoint");
  const json m = read_manifest(d);
  TrainState st = state_from_manifest(m, dir);

  // Integrity of the tensor file before any of it is parsed.
  const std::string state_path = (fs::path(d) / kStateFile).string();
  ZDL_CHECK(fs::exists(state_path), "checkpoint '", dir, "' has no ", kStateFile);
  uint64_t want_bytes = 0;
  std::string want_sum;
  try {
    want_bytes = json_integer<uint64_t>(m.at("files").at(kStateFile).at("bytes"), "bytes");
    want_sum = m.at("files").at(kStateFile).at("fnv1a64").get<std::string>();
  } catch (const json::exception& e) {
    ZDL_CHECK(false, "checkpoint '", dir, "': ", kManifestFile, " lacks the size/checksum of ", kStateFile, ": ",
              e.what());
  }
  const uint64_t have_bytes = fs::file_size(state_path);
  ZDL_CHECK(have_bytes == want_bytes, "checkpoint '", dir, "': ", kStateFile, " is ", have_bytes, " bytes but ",
            want_bytes, " were written (", have_bytes < want_bytes ? "truncated" : "overwritten", ")");
  const std::string have_sum = hex64(fnv1a64_file(state_path));
  ZDL_CHECK(have_sum == want_sum, "checkpoint '", dir, "': ", kStateFile, " is corrupted (FNV-1a 64 checksum ",
            have_sum, " != recorded ", want_sum, ")");

  SafetensorsFile f = load_safetensors(state_path);
  std::map<std::string, Tensor> model_sd;
  NamedTensors optim_sd;
  for (auto& [n, t] : f.tensors) {
    if (n.rfind(kOptimPrefix, 0) == 0) optim_sd.emplace_back(n.substr(std::string(kOptimPrefix).size()), t);
    else model_sd.emplace(n, t);
  }

  // Every difference in one message, before anything is changed.
  std::string problems;
  auto problem = [&](const std::string& p) { problems += (problems.empty() ? "" : "; ") + p; };
  auto compare = [&](const NamedTensors& mine, std::map<std::string, Tensor> theirs, const std::string& prefix) {
    for (auto& [n, t] : mine) {
      auto it = theirs.find(n);
      if (it == theirs.end()) {
        problem("missing: " + prefix + n);
        continue;
      }
      if (it->second.shape() != t.shape())
        problem(prefix + n + " (expected " + shape_str(t.shape()) + ", got " + shape_str(it->second.shape()) + ")");
      else if (is_floating(it->second.dtype()) != is_floating(t.dtype()))  // integers are never read as floats
        problem(prefix + n + " (expected " + dtype_name(t.dtype()) + ", got " + dtype_name(it->second.dtype()) + ")");
      theirs.erase(it);
    }
    for (auto& [n, t] : theirs) problem("unexpected: " + prefix + n);
  };
  compare(model.state_dict(), model_sd, "");
  compare(optimizer.state(), std::map<std::string, Tensor>(optim_sd.begin(), optim_sd.end()), kOptimPrefix);
  auto drops = dropout_modules(model);
  std::map<std::string, std::array<uint64_t, 3>> saved_drops;  // seed, stream, calls
  try {
    ZDL_CHECK(m.at("dropout").is_object(), "checkpoint '", dir, "': \"dropout\" in ", kManifestFile,
              " must be an object");
    for (const auto& it : m.at("dropout").items()) {
      const json& v = it.value();
      saved_drops[it.key()] = {json_integer<uint64_t>(v.at("seed"), "seed"), json_integer<uint64_t>(v.at("stream"), "stream"),
                               json_integer<uint64_t>(v.at("calls"), "calls")};
    }
  } catch (const json::exception& e) {
    ZDL_CHECK(false, "checkpoint '", dir, "': ", kManifestFile, " has a malformed \"dropout\" section: ", e.what());
  }
  for (auto& [n, d] : drops)
    if (!saved_drops.count(n)) problem("missing dropout state: " + n);
  for (auto& [n, c] : saved_drops)
    if (!drops.count(n)) problem("unexpected dropout state: " + n);
  ZDL_CHECK(problems.empty(), "checkpoint '", dir,
            "' was saved from a different model or optimizer (names/shapes differ): ", problems);

  model.load_state_dict(model_sd, /*strict=*/true);
  optimizer.load_state(optim_sd);
  for (auto& [n, d] : drops) {
    auto [seed, stream, calls] = saved_drops.at(n);
    d->seed = seed, d->stream = stream, d->calls = calls;
  }
  return st;
}

}  // namespace

void save_checkpoint(const std::string& dir, const nn::Module& model, const optim::Optimizer& optimizer,
                     const TrainState& state) {
  with_fs_errors(dir, "save_checkpoint", [&] { save_checkpoint_impl(dir, model, optimizer, state); });
}

TrainState load_checkpoint(const std::string& dir, nn::Module& model, optim::Optimizer& optimizer) {
  return with_fs_errors(dir, "load_checkpoint", [&] { return load_checkpoint_impl(dir, model, optimizer); });
}

TrainState read_train_state(const std::string& dir) {
  return with_fs_errors(dir, "read_train_state", [&] { return state_from_manifest(read_manifest(resolve_checkpoint_dir(dir, kManifestFile, "checkpoint")), dir); });
}

}  // namespace zdl::io

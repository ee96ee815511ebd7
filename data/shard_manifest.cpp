// Shard set manifests; see shard_manifest.h.
#include "data/shard_manifest.h"

#include <fnmatch.h>

#include <charconv>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/hash.h"
#include "data/llmc_shard.h"
#include "io/checkpoint_dir.h"
#include "io/json_fields.h"

namespace zdl::data {

namespace {

using json = nlohmann::json;

// "0x" and io::hex64's 16 digits: how a manifest writes a checksum.
std::string hex64(uint64_t v) { return "0x" + io::hex64(v); }

// The directory part of a path as given, with its '/' ("" for a bare name): listed names are
// joined to it as the glob's own matches are spelled.
std::string dir_part(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

std::string base_name(const std::string& path) { return path.substr(dir_part(path).size()); }

// j[key], or an error naming the manifest that lacks it.
const json& field(const json& j, const char* key, const std::string& path) {
  ZDL_CHECK(j.is_object() && j.contains(key), "the shard manifest '", path, "' has no \"", key, "\"");
  return j.at(key);
}

}  // namespace

std::string shard_manifest_path(const std::string& prefix) { return prefix + "_manifest.json"; }

std::optional<std::string> shard_prefix(const std::string& path) {
  if (!path.ends_with(".bin")) return std::nullopt;
  const size_t digits_end = path.size() - 4;
  size_t digits = digits_end;
  while (digits > 0 && path[digits - 1] >= '0' && path[digits - 1] <= '9') --digits;
  if (digits == digits_end) return std::nullopt;
  for (const std::string_view split : {"_val_", "_train_"}) {
    const std::string_view head = std::string_view(path).substr(0, digits);
    if (head.ends_with(split) && head.size() > split.size() && head[head.size() - split.size() - 1] != '/')
      return std::string(head.substr(0, head.size() - split.size()));
  }
  return std::nullopt;
}

std::string manifest_shard_header(int64_t count) {
  std::string header = llmc_shard_header(count);
  for (int b = 0; b < 4; ++b) header[12 + b] = static_cast<char>(static_cast<uint32_t>(kManifestShardTag) >> (8 * b));
  return header;
}

bool has_manifest_tag(const MappedFile& shard) {
  if (shard.size() < 16) return false;
  const uint8_t* p = shard.data() + 12;
  const uint32_t v = p[0] | p[1] << 8 | p[2] << 16 | static_cast<uint32_t>(p[3]) << 24;
  return v == static_cast<uint32_t>(kManifestShardTag);
}

std::string shard_manifest_json(const std::vector<ManifestShard>& shards) {
  json files = json::array();
  for (const ManifestShard& s : shards)
    files.push_back({{"name", s.name}, {"bytes", s.bytes}, {"fnv1a64", hex64(s.fnv1a)}});
  const json j = {{"format", kShardManifestFormat},
                  {"version", kShardManifestVersion},
                  {"shards", static_cast<int64_t>(shards.size())},
                  {"files", files}};
  return j.dump(1) + "\n";
}

std::vector<ManifestShard> read_shard_manifest(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ZDL_CHECK(in.good(), "cannot read the shard manifest '", path, "'");
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    ZDL_CHECK(false, "the shard manifest '", path, "' is not valid JSON: ", e.what());
  }
  const json& format = field(j, "format", path);
  ZDL_CHECK(format == kShardManifestFormat, "'", path, "' is not a shard manifest: its format is ",
            io::json_shown(format), ", not \"", kShardManifestFormat, "\"");
  const int64_t version = io::json_integer<int64_t>(field(j, "version", path), "'" + path + "': version");
  ZDL_CHECK(version == kShardManifestVersion, "the shard manifest '", path, "' has version ", version,
            ", which this zerodl does not read (only ", kShardManifestVersion, ")");
  const json& files = field(j, "files", path);
  ZDL_CHECK(files.is_array(), "the shard manifest '", path, "': \"files\" must be an array, got ",
            io::json_shown(files));
  const int64_t count = io::json_integer<int64_t>(field(j, "shards", path), "'" + path + "': shards");
  ZDL_CHECK(count == static_cast<int64_t>(files.size()), "the shard manifest '", path, "' says ", count,
            " shards but lists ", files.size());
  std::vector<ManifestShard> shards;
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string what = detail::str("'", path, "': files[", i, "]");
    ManifestShard s;
    const json& name = field(files[i], "name", path);
    ZDL_CHECK(name.is_string() && !name.get<std::string>().empty() &&
                  name.get<std::string>().find('/') == std::string::npos,
              what, ".name must be a file name, got ", io::json_shown(name));
    s.name = name.get<std::string>();
    s.bytes = io::json_integer<int64_t>(field(files[i], "bytes", path), what + ".bytes");
    const json& hash = field(files[i], "fnv1a64", path);
    const std::string h = hash.is_string() ? hash.get<std::string>() : "";
    const auto [end, err] = h.size() == 18 && h.starts_with("0x")
                                ? std::from_chars(h.data() + 2, h.data() + h.size(), s.fnv1a, 16)
                                : std::from_chars_result{nullptr, std::errc::invalid_argument};
    ZDL_CHECK(err == std::errc() && end == h.data() + h.size(), what,
              ".fnv1a64 must be \"0x\" and 16 hex digits, got ", io::json_shown(hash));
    shards.push_back(std::move(s));
  }
  return shards;
}

std::vector<DataFingerprint> check_shard_manifests(const std::string& source, bool pattern,
                                                   const std::vector<const MappedFile*>& shards) {
  std::map<std::string, std::vector<size_t>> by_manifest;  // manifest path -> the shards it covers
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string& path = shards[i]->path();
    const std::optional<std::string> prefix = shard_prefix(path);
    if (!prefix) continue;
    const std::string manifest = shard_manifest_path(*prefix);
    std::error_code ec;
    if (std::filesystem::exists(manifest, ec)) {
      by_manifest[manifest].push_back(i);
      continue;
    }
    ZDL_CHECK(!has_manifest_tag(*shards[i]), "'", path, "' was written by prepare_tokens, but the set's manifest '",
              manifest, "', which it writes after every shard is in place, is missing: the run that wrote the set "
              "was interrupted (or the manifest removed), so shards may be missing; run prepare_tokens again (after "
              "removing ", base_name(*prefix), "_*.bin there)");
  }
  // One run reads one set: a pattern written for set "p" ('p_train_*.bin') also matches a set
  // prepared as "p_train" beside it, validation shard included, which trained silently.
  if (pattern && by_manifest.size() > 1) {
    const auto first = by_manifest.begin(), second = std::next(first);
    ZDL_CHECK(false, "'", source, "' matches the shards of ", by_manifest.size(), " prepare_tokens sets (manifests '",
              first->first, "' and '", second->first, "'", by_manifest.size() > 2 ? ", ..." : "",
              "): a run reads one set; give a pattern that matches one set's shards only (e.g. '",
              dir_part(shards[first->second[0]]->path()), base_name(*shard_prefix(shards[first->second[0]]->path())),
              "_train_*.bin')");
  }
  std::vector<DataFingerprint> fps(shards.size());
  size_t checked = 0;
  for (const auto& [manifest, covered] : by_manifest) {
    const std::vector<ManifestShard> listed = read_shard_manifest(manifest);
    std::map<std::string, const ManifestShard*> by_name;
    for (const ManifestShard& s : listed) by_name[s.name] = &s;
    const std::string dir = dir_part(shards[covered[0]]->path());
    std::map<std::string, size_t> present;  // name -> index in `shards`
    for (size_t i : covered) {
      const MappedFile& f = *shards[i];
      const auto it = by_name.find(base_name(f.path()));
      ZDL_CHECK(it != by_name.end(), "'", f.path(), "' is not one of the ", listed.size(),
                " shards its set's manifest '", manifest, "' lists: a file of another run; remove it, or run "
                "prepare_tokens again for a whole set");
      const ManifestShard& want = *it->second;
      ZDL_CHECK(f.size() == want.bytes, "'", f.path(), "' has ", f.size(), " bytes, its set's manifest '", manifest,
                "' says ", want.bytes, ": not the file prepare_tokens wrote");
      const uint64_t h = fnv1a64(f.data(), static_cast<size_t>(f.size()));
      ZDL_CHECK(h == want.fnv1a, "'", f.path(), "' has the FNV-1a checksum ", hex64(h), ", its set's manifest '",
                manifest, "' says ", hex64(want.fnv1a), " (the same ", want.bytes,
                " bytes): the file changed since prepare_tokens wrote it");
      fps[i] = {f.size(), h};
      present[want.name] = i;
      ++checked;
    }
    if (!pattern) continue;  // a file named by itself is that file, whatever else the set holds
    int64_t matching = 0;
    const ManifestShard* missing = nullptr;
    for (const ManifestShard& s : listed) {
      if (::fnmatch(source.c_str(), (dir + s.name).c_str(), FNM_PATHNAME) != 0) continue;
      ++matching;
      if (!present.contains(s.name) && missing == nullptr) missing = &s;
    }
    ZDL_CHECK(missing == nullptr, "'", dir, missing ? missing->name : "", "' is missing: the manifest '", manifest,
              "' lists ", matching, " shards that '", source, "' matches, ", present.size(),
              " of them are there; restore it, or run prepare_tokens again");
  }
  if (checked < shards.size()) return {};
  return fps;
}

}  // namespace zdl::data

#include "data/data_record.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/check.h"

namespace zdl::data {

using json = nlohmann::json;

namespace {

constexpr const char* kResumeAdvice = "resume on the data the run was trained on";

// The paths of the files the record names, in reading order (none for an older checkpoint).
std::vector<std::string> recorded_paths(const Metadata& metadata) {
  std::vector<std::string> paths;
  const auto it = metadata.find(kDataRecordKey);
  if (it == metadata.end()) return paths;
  const json record = json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  if (!record.is_object() || !record.contains("files") || !record["files"].is_array()) return paths;
  for (const json& f : record["files"]) paths.push_back(f.value("path", std::string()));
  return paths;
}

// Not the file the checkpoint was trained on (another path than the record's): said so, rather
// than "it changed since", which blames a file that never changed. "" when it is the same path.
std::string another_file(const Metadata& metadata, size_t i, const std::string& now_path) {
  const std::vector<std::string> paths = recorded_paths(metadata);
  // Relative paths (checkpoints before they were recorded absolute) depend on where that run ran.
  if (i >= paths.size() || !std::filesystem::path(paths[i]).is_absolute()) return "";
  std::error_code e1, e2;
  const auto then = std::filesystem::weakly_canonical(paths[i], e1), now = std::filesystem::weakly_canonical(now_path, e2);
  if (e1 || e2 || then == now) return "";
  return detail::str("the data file '", now_path, "' is not the one the checkpoint was trained on ('", paths[i],
                     "'); ", kResumeAdvice, " (to start from its weights on other data: consolidate_checkpoint, "
                     "then --init-from)");
}

}  // namespace

std::string data_record(const TokenFiles& files, const std::vector<DataFingerprint>& fps) {
  json list = json::array();
  for (size_t i = 0; i < fps.size(); ++i)
    list.push_back({{"path", std::filesystem::absolute(files.files()[i].mapped.path()).lexically_normal().string()},
                    {"tokens", files.files()[i].count},
                    {"fingerprint", fps[i].to_string()}});
  return json{{"source", files.source()}, {"format", format_name(files.format())}, {"files", list}}.dump();
}

std::string recorded_format(const Metadata& metadata) {
  const auto it = metadata.find(kDataRecordKey);
  if (it == metadata.end()) return "";
  const json record = json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  return record.is_object() ? record.value("format", std::string()) : "";
}

std::vector<DataFingerprint> recorded_file_fingerprints(const Metadata& metadata) {
  std::vector<DataFingerprint> saved;
  try {
    if (auto it = metadata.find(kDataRecordKey); it != metadata.end()) {
      const json record = json::parse(it->second);
      for (const json& f : record.at("files"))
        saved.push_back(DataFingerprint::parse(f.at("fingerprint").get<std::string>()));
    } else if (auto fp = metadata.find(kDataFingerprintKey); fp != metadata.end()) {
      saved.push_back(DataFingerprint::parse(fp->second));
    }
  } catch (const std::exception& e) {
    throw Error(std::string("the checkpoint's record of its data is unreadable: ") + e.what());
  }
  return saved;
}

void check_sizes_match_record(const Metadata& metadata, const TokenFiles& files, const std::string& named) {
  const auto saved = recorded_file_fingerprints(metadata);
  const auto& now = files.files();
  if (saved.empty()) return;
  if (saved.size() != now.size())
    throw Error(detail::str(named, " reads ", now.size(), " file(s) now, ", saved.size(),
                            " when the checkpoint was saved; ", kResumeAdvice));
  for (size_t i = 0; i < now.size(); ++i) {
    const int64_t size = now[i].mapped.size(), then = saved[i].size;
    if (size == then) continue;
    if (std::string other = another_file(metadata, i, now[i].mapped.path()); !other.empty()) throw Error(other);
    throw Error(detail::str("the data file '", now[i].mapped.path(), "'",
                            now.size() > 1 ? detail::str(" (file ", i + 1, " of ", now.size(), ")") : "", " is ",
                            size < then ? "shorter" : "longer", " than when the checkpoint was saved (", size,
                            " bytes now, ", then, " then): it changed since the checkpoint; ", kResumeAdvice));
  }
}

void check_bytes_match_record(const Metadata& metadata, const TokenFiles& files,
                              const std::vector<DataFingerprint>& fps, const std::string& named) {
  const std::string now = combine(fps).to_string();
  const auto saved = metadata.find(kDataFingerprintKey);
  if (saved != metadata.end() && saved->second == now) return;
  auto changed = [](const std::string& what, const std::string& then, const std::string& is) {
    return Error(what + " changed since the checkpoint (saved " + then + ", now " + is + "); " + kResumeAdvice);
  };
  const auto saved_files = recorded_file_fingerprints(metadata);
  for (size_t i = 0; i < saved_files.size() && i < fps.size(); ++i)
    if (saved_files[i] != fps[i]) {
      if (std::string other = another_file(metadata, i, files.files()[i].mapped.path()); !other.empty())
        throw Error(other);
      throw changed("the data file '" + files.files()[i].mapped.path() + "'", saved_files[i].to_string(),
                    fps[i].to_string());
    }
  throw changed(named, saved == metadata.end() ? "nothing" : saved->second, now);
}

}  // namespace zdl::data

// TokenFiles; see token_files.h.
#include "data/token_files.h"

#include <glob.h>

#include <algorithm>
#include <filesystem>
#include <utility>

#include "core/check.h"
#include "core/hash.h"
#include "data/llmc_shard.h"
#include "data/shard_manifest.h"

namespace zdl::data {

namespace {

// The files `source` names, in byte order of their names (not the locale's collation).
std::vector<std::string> expand(const std::string& source) {
  if (!is_glob_pattern(source)) return {source};
  glob_t g{};
  const int rc = ::glob(source.c_str(), GLOB_NOSORT, nullptr, &g);
  std::vector<std::string> paths;
  if (rc == 0) paths.assign(g.gl_pathv, g.gl_pathv + g.gl_pathc);
  ::globfree(&g);
  ZDL_CHECK(rc != GLOB_NOMATCH, "no file matches the pattern '", source, "'");
  ZDL_CHECK(rc == 0, "cannot expand the pattern '", source, "': ",
            rc == GLOB_NOSPACE ? "out of memory" : "a directory could not be read");
  std::sort(paths.begin(), paths.end());
  return paths;
}

// Why a file of a pattern whose other files are llm.c shards was read as bytes.
std::string why_bytes(const MappedFile& f) {
  if (!f.path().ends_with(".bin")) return "its name does not end in .bin";
  return detail::str("it does not start with llm.c's magic ", kLlmcMagic);
}

uint16_t uint16_le(const uint8_t* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }

// The largest token id in `f` (0 if it holds none): a loop the compiler vectorizes.
int64_t largest_id_in(const TokenFile& f, TokenFormat format) {
  if (format == TokenFormat::Bytes) {
    uint8_t m = 0;
    for (int64_t i = 0; i < f.count; ++i) m = std::max(m, f.ids[i]);
    return m;
  }
  uint16_t m = 0;
  for (int64_t i = 0; i < f.count; ++i) m = std::max(m, uint16_le(f.ids + 2 * i));
  return m;
}

}  // namespace

const char* format_name(TokenFormat f) { return f == TokenFormat::Bytes ? "bytes" : "llm.c"; }

bool is_glob_pattern(const std::string& source) {
  std::error_code ec;
  return source.find_first_of("*?[") != std::string::npos && !std::filesystem::exists(source, ec);
}

TokenFiles::TokenFiles(std::string source) : source_(std::move(source)) {
  for (const std::string& path : expand(source_)) {
    TokenFile f{MappedFile(path)};
    const bool shard = detect_llmc_shard(f.mapped);
    const TokenFormat format = shard ? TokenFormat::Llmc : TokenFormat::Bytes;
    if (files_.empty()) format_ = format;
    if (format != format_) {
      const MappedFile& bytes = shard ? files_[0].mapped : f.mapped;
      const MappedFile& llmc = shard ? f.mapped : files_[0].mapped;
      ZDL_CHECK(false, "the files of '", source_, "' mix formats: '", llmc.path(), "' is an llm.c token shard, '",
                bytes.path(), "' is read as bytes (", why_bytes(bytes),
                "); a pattern must match llm.c shards only, or text files only");
    }
    if (shard) {
      const LlmcTokens t = llmc_shard_tokens(f.mapped);
      f.ids = t.ids;
      f.count = t.count;
    } else {
      f.ids = f.mapped.data();
      f.count = f.mapped.size();
    }
    f.first = num_tokens_;
    num_tokens_ += f.count;
    files_.push_back(std::move(f));
  }
  if (format_ == TokenFormat::Llmc) {
    std::vector<const MappedFile*> shards;
    for (const TokenFile& f : files_) shards.push_back(&f.mapped);
    fingerprints_ = check_shard_manifests(source_, is_glob_pattern(source_), shards);
  }
}

int64_t TokenFiles::id(const TokenFile& f, int64_t i) const {
  return format_ == TokenFormat::Bytes ? f.ids[i] : uint16_le(f.ids + 2 * i);
}

void TokenFiles::read(int64_t begin, int64_t count, int64_t* out) const {
  ZDL_CHECK(begin >= 0 && count >= 0 && begin + count <= num_tokens_, "TokenFiles '", source_, "': tokens [", begin,
            ", ", begin + count, ") are outside the stream of ", num_tokens_);
  // The last file starting at or before `begin` (empty llm.c shards start where the next does).
  auto f = std::upper_bound(files_.begin(), files_.end(), begin,
                            [](int64_t pos, const TokenFile& file) { return pos < file.first; });
  for (--f; count > 0; ++f) {
    const int64_t at = begin - f->first;
    const int64_t n = std::min(count, f->count - at);
    if (format_ == TokenFormat::Bytes) {
      for (int64_t i = 0; i < n; ++i) out[i] = f->ids[at + i];
    } else {
      for (int64_t i = 0; i < n; ++i) out[i] = uint16_le(f->ids + 2 * (at + i));
    }
    out += n;
    begin += n;
    count -= n;
  }
}

void TokenFiles::check_ids_below(int64_t vocab) const {
  ZDL_CHECK(vocab >= 1, "TokenFiles::check_ids_below: vocab must be >= 1, got ", vocab);
  if (vocab > (format_ == TokenFormat::Bytes ? 255 : 65535)) return;  // no id of the format reaches it
  for (const TokenFile& f : files_) {
    if (largest_id_in(f, format_) < vocab) continue;
    int64_t at = 0;
    while (id(f, at) < vocab) ++at;
    const int64_t largest = largest_id();
    const int64_t byte = (f.ids - f.mapped.data()) + at * (format_ == TokenFormat::Bytes ? 1 : kLlmcTokenBytes);
    ZDL_CHECK(false, "'", f.mapped.path(), "' holds token id ", id(f, at), " at token ", at, " (byte ", byte,
              " of the file), outside the model's vocabulary of ", vocab, " ids; the data's largest id is ", largest,
              ", so the vocabulary must be at least ", largest + 1);
  }
}

int64_t TokenFiles::largest_id() const {
  int64_t largest = 0;
  for (const TokenFile& f : files_) largest = std::max(largest, largest_id_in(f, format_));
  return largest;
}

void TokenFiles::check_unchanged() const {
  for (const TokenFile& f : files_) f.mapped.check_unchanged();
}

std::vector<DataFingerprint> TokenFiles::file_fingerprints() const {
  if (!fingerprints_.empty()) return fingerprints_;  // hashed at open, against the manifest; unchanged since
  std::vector<DataFingerprint> fps;
  fps.reserve(files_.size());
  for (const TokenFile& f : files_)
    fps.push_back({f.mapped.size(), fnv1a64(f.mapped.data(), static_cast<size_t>(f.mapped.size()))});
  return fps;
}

}  // namespace zdl::data

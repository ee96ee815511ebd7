// prepare_tokens: turns a text file into llm.c token shards with a BPE tokenizer (GPT-2's
// encoder.json + vocab.bpe, or a .tiktoken file), for train_gpt --data. One process.
//
//   prepare_tokens --input tinyshakespeare.txt --tokenizer gpt2.tiktoken --output shards/tiny
//   # shards/tiny_val_000000.bin, shards/tiny_train_000001.bin, ...
//   train_gpt --data 'shards/tiny_train_*.bin' --tokenizer gpt2.tiktoken --sample 200
//
// The layout is llm.c's (its fineweb.py): the text is cut into documents (--doc-split), each
// encoded with <|endoftext|> before it; the first shard, PREFIX_val_000000.bin, holds the
// validation documents (about --val-tokens), and PREFIX_train_NNNNNN.bin the rest, numbered on
// from 1, --shard-tokens at most each. A shard holds whole documents, so each begins with
// <|endoftext|> and no document is split between validation and training; only a document longer
// than a whole shard is cut, and continues at the start of the next one.
//
// Shards are written to temporary files and renamed into place when all are written, then the
// set's manifest, PREFIX_manifest.json (data/shard_manifest.h: each shard's name, size and
// checksum), last: a failure leaves none of them behind, and a run killed while renaming leaves
// shards without a manifest, which train_gpt refuses (a partial set would otherwise read as the
// whole dataset through a glob). Shards or a manifest of an earlier run under the same prefix
// are refused rather than mixed with. Ctrl-C (or SIGTERM, SIGHUP) removes the staged shards.
//
// Exit codes: 0 done, 2 bad input (flags, files), 1 a failure while writing.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/hash.h"
#include "data/bpe_tokenizer.h"
#include "data/gpt2_pretokenizer.h"
#include "data/llmc_shard.h"
#include "data/mapped_file.h"
#include "data/shard_manifest.h"
#include "io/checkpoint_dir.h"
#include "io/file.h"
#include "io/program_flags.h"
#include "io/temporary_files.h"

using namespace zdl;
namespace fs = std::filesystem;

namespace {

struct Args {
  std::string input, tokenizer, output;
  int64_t shard_tokens = 100'000'000;  // llm.c's fineweb shards
  int64_t val_tokens = 32'768;         // llm.c's tiny shakespeare validation split
  std::string doc_split = "blank-line";
};

// A bad flag or file (exit 2), as opposed to a failure while writing (exit 1).
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The documents of the text, in order, none empty. blank-line: a document ends after each
// "\n\n" (llm.c's tiny shakespeare rule: text.replace('\n\n', '\n\n<|endoftext|>')); eot: the
// text holds the literal <|endoftext|> between documents (dropped: each becomes the token); none:
// the whole text is one document.
class Documents {
 public:
  Documents(std::string_view text, const std::string& mode) : text_(text), mode_(mode) {}
  bool next(std::string_view& doc) {
    while (pos_ < text_.size()) {
      const size_t begin = pos_;
      size_t end = text_.size();
      if (mode_ == "blank-line") {
        const size_t sep = text_.find("\n\n", begin);
        end = pos_ = sep == std::string_view::npos ? text_.size() : sep + 2;
      } else if (mode_ == "eot") {
        constexpr std::string_view kMarker = "<|endoftext|>";
        const size_t sep = text_.find(kMarker, begin);
        end = sep == std::string_view::npos ? text_.size() : sep;
        pos_ = sep == std::string_view::npos ? text_.size() : sep + kMarker.size();
      } else {
        pos_ = end;
      }
      if (end > begin) {
        doc = text_.substr(begin, end - begin);
        return true;
      }
    }
    return false;
  }
  size_t position() const { return pos_; }

 private:
  std::string_view text_;
  std::string mode_;
  size_t pos_ = 0;
};

// Shards written to temporary files beside their final names (io::AtomicFileWriter, closed but
// not committed), renamed into place by commit() once all are written, the manifest that lists
// them last; until then the destructor removes every file this object made, shards already
// renamed included.
class StagedShards {
 public:
  explicit StagedShards(std::string manifest) : manifest_(std::move(manifest)) {}
  ~StagedShards() {
    for (size_t i = 0; i < renamed_; ++i) ::unlink(staged_[i]->path().c_str());
  }  // the writers not committed remove their temporary files themselves
  void write(const std::string& path, const std::vector<uint16_t>& ids) {
    std::string bytes = data::manifest_shard_header(static_cast<int64_t>(ids.size()));
    bytes.reserve(bytes.size() + 2 * ids.size());
    for (uint16_t id : ids) bytes += {static_cast<char>(id & 0xFF), static_cast<char>(id >> 8)};  // little-endian
    stage(path, bytes);
    listed_.push_back({fs::path(path).filename().string(), static_cast<int64_t>(bytes.size()),
                       fnv1a64(bytes.data(), bytes.size())});
  }
  void commit() {
    stage(manifest_, data::shard_manifest_json(listed_));
    // Counted before its rename: a failure after it (the directory's fsync) still removes it.
    while (renamed_ < staged_.size()) staged_[renamed_++]->commit();
    staged_.clear();
    renamed_ = 0;
  }

 private:
  void stage(const std::string& path, const std::string& bytes) {
    staged_.push_back(std::make_unique<io::AtomicFileWriter>(path));
    staged_.back()->write(bytes.data(), bytes.size());
    staged_.back()->close();
  }
  std::string manifest_;
  std::vector<data::ManifestShard> listed_;
  std::vector<std::unique_ptr<io::AtomicFileWriter>> staged_;
  size_t renamed_ = 0;
};

// The shards of one run: tokens of whole documents gather in `current` until the next document
// would take it past the shard's capacity (--val-tokens for the first, with --val-tokens > 0;
// --shard-tokens after), which closes it.
class ShardPacker {
 public:
  ShardPacker(const Args& a, StagedShards& out) : a_(a), out_(out) {}

  // A document's tokens as they are encoded (the first call of a document starts with the
  // end-of-text token); end_document() when it is whole.
  void add(const std::vector<int64_t>& ids) {
    pending_.insert(pending_.end(), ids.begin(), ids.end());
    while (current_.size() + pending_.size() > capacity()) {
      if (current_.empty()) {  // a document longer than a shard: cut it
        current_.assign(pending_.begin(), pending_.begin() + static_cast<int64_t>(capacity()));
        pending_.erase(pending_.begin(), pending_.begin() + static_cast<int64_t>(capacity()));
      }
      close_shard();
    }
  }
  void end_document() {
    current_.insert(current_.end(), pending_.begin(), pending_.end());
    pending_.clear();
  }
  void finish() {
    if (!current_.empty()) close_shard();
  }
  // (path, tokens) of each shard, in order.
  const std::vector<std::pair<std::string, int64_t>>& shards() const { return shards_; }

 private:
  bool in_val() const { return a_.val_tokens > 0 && shards_.empty(); }
  size_t capacity() const { return static_cast<size_t>(in_val() ? a_.val_tokens : a_.shard_tokens); }
  void close_shard() {
    char index[16];
    std::snprintf(index, sizeof index, "%06zu", shards_.size());
    const std::string path = a_.output + (in_val() ? "_val_" : "_train_") + index + ".bin";
    out_.write(path, current_);
    shards_.emplace_back(path, static_cast<int64_t>(current_.size()));
    current_.clear();
  }

  const Args& a_;
  StagedShards& out_;
  std::vector<uint16_t> current_, pending_;
  std::vector<std::pair<std::string, int64_t>> shards_;
};

// Shards or a manifest of an earlier run under this prefix: a new set would mix with them under
// a glob, and the old manifest would not list the new shards.
void check_no_earlier_shards(const std::string& prefix) {
  const fs::path p(prefix);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");  // made by run() before
  std::error_code ec;
  const std::string name = p.filename().string();
  int64_t stale = 0;  // hidden shard temporaries of a run killed outright (SIGKILL: no cleanup ran)
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string f = entry.path().filename().string();
    if (f.starts_with("." + name + "_") && f.find(".bin.tmp.") != std::string::npos) ++stale;
    const bool shard = f.ends_with(".bin") && (f.starts_with(name + "_val_") || f.starts_with(name + "_train_"));
    if (shard || f == fs::path(data::shard_manifest_path(name)).filename())
      throw UsageError("--output: '" + entry.path().string() + "' exists, " +
                       (shard ? "a shard" : "the manifest") + " of an earlier run; remove the " + name +
                       "_val_*.bin, " + name + "_train_*.bin and " + name + "_manifest.json files there or choose " +
                       "another --output (a new set would mix with the old one under a glob)");
  }
  if (ec) throw UsageError("--output: cannot list the directory '" + dir.string() + "': " + ec.message());
  if (stale > 0)
    std::fprintf(stderr, "prepare_tokens: warning: %lld hidden temporary file(s) of an earlier run that was killed "
                 "('%s') take space there; remove them\n",
                 static_cast<long long>(stale), (dir / ("." + name + "_*.bin.tmp.*")).string().c_str());
}

// Below this many tokens a shard holds less than its own 1024-byte header, and each shard is a
// file written and synced on its own: --shard-tokens 1 writes a few hundred bytes of text a second.
constexpr int64_t kFewestShardTokens = data::kLlmcHeaderBytes / data::kLlmcTokenBytes;

// Says, on stderr, how many shards --shard-tokens below kFewestShardTokens makes at most: one
// token per byte of the text and one per document bound the tokens.
void warn_if_shards_are_tiny(const Args& a, std::string_view text) {
  if (a.shard_tokens >= kFewestShardTokens) return;
  int64_t docs = 0;
  Documents d(text, a.doc_split);
  for (std::string_view doc; d.next(doc);) ++docs;
  const int64_t most = (static_cast<int64_t>(text.size()) + docs + a.shard_tokens - 1) / a.shard_tokens +
                       (a.val_tokens > 0 ? 1 : 0);
  std::fprintf(stderr,
               "prepare_tokens: warning: --shard-tokens %lld makes up to %lld shards of '%s', each a file with a "
               "%lld-byte header (more than its tokens take below %lld), written and synced one by one: slow, and "
               "mostly headers; llm.c's shards hold 100M tokens\n",
               static_cast<long long>(a.shard_tokens), static_cast<long long>(most), a.input.c_str(),
               static_cast<long long>(data::kLlmcHeaderBytes), static_cast<long long>(kFewestShardTokens));
  std::fflush(stderr);
}

// "812 bytes", "45.3 kB", "1.1 MB", "9.8 GB".
std::string size_text(double bytes) {
  if (bytes < 1e3) return detail::str(static_cast<int64_t>(bytes), " bytes");
  const char* unit = bytes < 1e6 ? " kB" : bytes < 1e9 ? " MB" : " GB";
  const double scaled = bytes / (bytes < 1e6 ? 1e3 : bytes < 1e9 ? 1e6 : 1e9);
  return detail::str(static_cast<int64_t>(scaled * 10 + 0.5) / 10.0, unit);
}

int run(const Args& a) {
  // ---- flags and files (exit 2) ----
  if (a.output.empty() || fs::path(a.output).filename().empty())
    throw UsageError("--output: '" + a.output + "' names no file prefix (e.g. shards/tiny)");
  std::optional<data::BpeTokenizer> tok;
  try {
    tok.emplace(data::BpeTokenizer::load(a.tokenizer));
  } catch (const Error& e) {
    throw UsageError(std::string("--tokenizer: ") + e.what());
  }
  if (tok->vocab_size() > 65536)
    throw UsageError(detail::str("--tokenizer: its vocabulary holds ", tok->vocab_size(),
                                 " tokens; llm.c's shards store ids as uint16, so at most 65536"));
  if (!tok->eot_id())
    throw UsageError("--tokenizer: its vocabulary has no <|endoftext|>, which begins every document of a shard");
  std::optional<data::MappedFile> input;
  try {
    input.emplace(a.input);
  } catch (const Error& e) {
    throw UsageError(std::string("--input: ") + e.what());
  }
  // The shards' directory is made if missing (as --save makes a checkpoint's parent); one that
  // cannot be made or written fails here, before any encoding.
  const fs::path out_dir = fs::path(a.output).parent_path();
  std::error_code made;
  if (!out_dir.empty()) fs::create_directories(out_dir, made);
  if (made) throw UsageError("--output: cannot create the directory '" + out_dir.string() + "': " + made.message());
  try {
    io::check_can_write_in(out_dir.empty() ? "." : out_dir.string(), a.output);
  } catch (const Error& e) {
    throw UsageError(std::string("--output: ") + without_code_location(e.what()));
  }
  check_no_earlier_shards(a.output);

  const std::string_view text(reinterpret_cast<const char*>(input->data()), static_cast<size_t>(input->size()));
  warn_if_shards_are_tiny(a, text);

  // ---- encoding and writing (exit 1) ----
  const auto start = std::chrono::steady_clock::now();
  auto last_report = start;
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  StagedShards staged(data::shard_manifest_path(a.output));
  ShardPacker packer(a, staged);
  Documents docs(text, a.doc_split);
  int64_t num_docs = 0, num_tokens = 0;
  constexpr size_t kSlice = size_t{1} << 20;  // a long document is encoded about this many bytes at a time
  for (std::string_view doc; docs.next(doc); ++num_docs) {
    std::vector<int64_t> ids{*tok->eot_id()};
    for (size_t at = 0; at < doc.size();) {
      const size_t cut = doc.size() - at > kSlice ? data::gpt2_split_point(doc, at + kSlice) : doc.size();
      const std::vector<int64_t> part = tok->encode(doc.substr(at, cut - at));
      ids.insert(ids.end(), part.begin(), part.end());
      num_tokens += static_cast<int64_t>(ids.size());
      packer.add(ids);
      ids.clear();
      at = cut;
      if (std::chrono::steady_clock::now() - last_report > std::chrono::seconds(2)) {
        last_report = std::chrono::steady_clock::now();
        const double done = static_cast<double>(docs.position() - doc.size() + at);
        std::printf("prepare_tokens: %.0f%% of %s, %lld tokens, %s/s\n",
                    100.0 * done / static_cast<double>(text.size()), size_text(static_cast<double>(text.size())).c_str(), static_cast<long long>(num_tokens),
                    size_text(done / seconds()).c_str());
        std::fflush(stdout);
      }
    }
    packer.end_document();
  }
  packer.finish();
  if (num_docs == 0) throw UsageError("--input: '" + a.input + "' holds no text besides <|endoftext|> markers");
  if (a.val_tokens > 0 && packer.shards().size() < 2)
    throw UsageError(detail::str("--val-tokens ", a.val_tokens, ": the ", num_tokens, " tokens of '", a.input,
                                 "' all went to the validation shard, leaving nothing to train on; give a smaller "
                                 "--val-tokens (or 0: no validation shard)"));
  staged.commit();
  const double s = seconds();
  std::printf("prepare_tokens: %s (%lld documents) -> %lld tokens in %zu shard(s), %.1f s (%.2fM tokens/s); "
              "tokenizer %s (%lld tokens)\n",
              size_text(static_cast<double>(text.size())).c_str(), static_cast<long long>(num_docs),
              static_cast<long long>(num_tokens), packer.shards().size(), s, static_cast<double>(num_tokens) / s / 1e6,
              tok->source().c_str(), static_cast<long long>(tok->vocab_size()));
  for (const auto& [path, n] : packer.shards())
    std::printf("  %s  %lld tokens\n", path.c_str(), static_cast<long long>(n));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"prepare_tokens: encode a text file with a BPE tokenizer into llm.c token shards (train_gpt --data)"};
  app.add_option("--input", a.input, "the text file")->required();
  app.add_option("--tokenizer", a.tokenizer,
                 "GPT-2's tokenizer files: a directory with encoder.json and vocab.bpe, or a .tiktoken file")
      ->required();
  app.add_option("--output", a.output,
                 "prefix of the shards: PREFIX_val_000000.bin, PREFIX_train_000001.bin, ... (its directory is made if missing)")
      ->required();
  app.add_option("--shard-tokens", a.shard_tokens, "tokens per training shard at most (llm.c: 100M)")
      ->check(CLI::Range(int64_t{1}, int64_t{INT32_MAX}));
  app.add_option("--val-tokens", a.val_tokens,
                 "tokens of the validation shard, the first documents (at most; 0: no validation shard)")
      ->check(CLI::Range(int64_t{0}, int64_t{INT32_MAX}));
  app.add_option("--doc-split", a.doc_split,
                 "where documents end: blank-line (after each \"\\n\\n\", as llm.c's tiny shakespeare), eot (at each "
                 "<|endoftext|> in the text), none (one document)")
      ->check(CLI::IsMember({"blank-line", "eot", "none"}));
  if (std::optional<int> code = zdl::io::check_invocation("prepare_tokens", app, argc, argv)) return *code;
  io::RemoveTemporariesOnSignal cleanup("prepare_tokens");  // Ctrl-C leaves no staged shard behind
  try {
    return run(a);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "prepare_tokens: %s\n", without_code_location(e.what()).c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "prepare_tokens: error: %s\n", e.what());
    return 1;
  }
}

// GPT-2's byte-level BPE; see bpe_tokenizer.h.
#include "data/bpe_tokenizer.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <array>
#include <functional>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "core/check.h"
#include "data/gpt2_pretokenizer.h"
#include "data/mapped_file.h"
#include "data/unicode_classes.h"
#include "io/json_fields.h"

namespace zdl::data {

namespace {

constexpr std::string_view kEndOfText = "<|endoftext|>";
// Ids must fit the pair keys (32 bits each); real vocabularies hold 50k to 200k tokens.
constexpr size_t kMaxTokens = size_t{1} << 24;

// GPT-2's byte alphabet (bytes_to_unicode in its encoder.py): the printable bytes ! to ~, ¡ to
// ¬ and ® to ÿ stand for themselves, the other 68, in increasing order, for U+0100 to U+0143.
// The byte that character `c` stands for, or -1.
int alphabet_byte(char32_t c) {
  static const std::array<int, 256 + 68> table = [] {
    std::array<int, 256 + 68> t;
    t.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[printable ? b : next++] = b;
    }
    return t;
  }();
  return c < table.size() ? table[c] : -1;
}

// A token's bytes as a message shows them: printable ASCII as is, other bytes as \xNN.
std::string shown(std::string_view bytes) {
  std::string s;
  for (unsigned char c : bytes.substr(0, 60)) {
    if (c >= 0x20 && c < 0x7F && c != '\\') {
      s += static_cast<char>(c);
    } else {
      const char* hex = "0123456789abcdef";
      s += {'\\', 'x', hex[c >> 4], hex[c & 15]};
    }
  }
  return bytes.size() > 60 ? s + "..." : s;
}

// Where a message says something was found: "'PATH'" or "'PATH' line N".
std::string at(const std::string& path, int64_t line = 0) {
  return line > 0 ? detail::str("'", path, "' line ", line) : "'" + path + "'";
}

// A token written in GPT-2's byte alphabet -> its bytes. Throws, naming `where`, for text that is
// not UTF-8 or holds a character outside the alphabet.
std::string alphabet_to_bytes(std::string_view text, const std::string& where) {
  std::string bytes;
  for (size_t i = 0; i < text.size();) {
    const Utf8Char c = utf8_char_at(text, i);
    ZDL_CHECK(c.valid, where, ": the token '", shown(text), "' is not UTF-8 (byte ", i, ")");
    const int b = alphabet_byte(c.cp);
    ZDL_CHECK(b >= 0, where, ": the token '", shown(text), "' holds U+", std::hex, std::uppercase,
              std::setw(4), std::setfill('0'), static_cast<uint32_t>(c.cp), std::dec,
              ", which is not one of GPT-2's 256 byte characters");
    bytes += static_cast<char>(b);
    i += c.len;
  }
  return bytes;
}

// The lines of a file, without their '\n' or "\r\n" (files saved on Windows; tiktoken reads
// them too, and no token of either format is written with a '\r'); a line end at the very end
// ends the last line and starts none.
std::vector<std::string_view> lines_of(const MappedFile& f) {
  const std::string_view text(reinterpret_cast<const char*>(f.data()), static_cast<size_t>(f.size()));
  std::vector<std::string_view> lines;
  for (size_t begin = 0; begin < text.size();) {
    const size_t end = std::min(text.find('\n', begin), text.size());
    std::string_view line = text.substr(begin, end - begin);
    if (end < text.size() && line.ends_with('\r')) line.remove_suffix(1);
    lines.push_back(line);
    begin = end + 1;
  }
  return lines;
}

// A tokenizer file, mapped; an empty one is named as what it is.
MappedFile tokenizer_file(const std::string& path) {
  std::error_code ec;
  ZDL_CHECK(!std::filesystem::is_regular_file(path, ec) || std::filesystem::file_size(path, ec) != 0,
            "the tokenizer file '", path, "' is empty (0 bytes)");
  return MappedFile(path);
}

// Standard base64 (RFC 4648, with padding), strictly: nullopt for anything else.
std::optional<std::string> base64_decode(std::string_view s) {
  if (s.empty() || s.size() % 4 != 0) return std::nullopt;
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
  };
  const size_t pad = s.ends_with("==") ? 2 : s.ends_with('=') ? 1 : 0;
  std::string out;
  uint32_t acc = 0;
  for (size_t i = 0; i < s.size() - pad; ++i) {
    const int v = value(s[i]);
    if (v < 0) return std::nullopt;
    acc = acc << 6 | static_cast<uint32_t>(v);
    if (i % 4 == 3) out += {static_cast<char>(acc >> 16), static_cast<char>(acc >> 8), static_cast<char>(acc)};
  }
  if (pad == 2) out += static_cast<char>(acc >> 4);
  if (pad == 1) out += {static_cast<char>(acc >> 10), static_cast<char>(acc >> 2)};
  // The bits the padding drops must be zero (else another string is the canonical form).
  if ((pad == 2 && (acc & 0xF)) || (pad == 1 && (acc & 0x3))) return std::nullopt;
  return out;
}

// Ids run from 0 to n-1 for n tokens: an id in that range, each once, leaves no gap.
std::string id_range(size_t n) {
  return detail::str("[0, ", n, ") (the ids of the file's ", n, " tokens run from 0 to ", n - 1, ")");
}

// Byte-level BPE's vocabulary is the 256 bytes, one token per merge and the special tokens
// (<|...|>, never merged into): GPT-2's 50257 = 256 + 50000 + 1. Other counts mean tokens no
// merge can make, e.g. a vocab.bpe cut short at a line boundary, whose lines all parse.
void check_every_token_is_reachable(const std::vector<std::string>& tokens, size_t merges,
                                    const std::string& encoder_json, const std::string& vocab_bpe) {
  const size_t specials = static_cast<size_t>(std::count_if(tokens.begin(), tokens.end(), [](const std::string& t) {
    return t.size() > 4 && t.starts_with("<|") && t.ends_with("|>");
  }));
  const size_t want = 256 + merges + specials;
  ZDL_CHECK(tokens.size() == want, at(encoder_json), " holds ", tokens.size(), " tokens, ", at(vocab_bpe), " ",
            merges, " merges: a byte-level BPE vocabulary is the 256 bytes, one token per merge and its ", specials,
            " special token(s), ", want, " here; ",
            tokens.size() > want ? detail::str(tokens.size() - want, " tokens no merge makes (is vocab.bpe cut short?)")
                                 : detail::str(want - tokens.size(), " merges make tokens that others make too"));
}

}  // namespace

// [Note: merging a pre-token] Parts of the pre-token are linked in a list over its byte offsets
// (a part keeps the offset of its first byte); every adjacent pair that has a merge waits in a
// min-heap ordered by (rank, offset). O(n log n) for a pre-token of n bytes, where rescanning
// all pairs after each merge would take O(n^2): a long run of punctuation or of one letter is
// one pre-token. A popped pair is skipped if it went stale (one of its parts was merged since:
// checked by the parts' ids). Each format's rule:
// - tiktoken merges the top pair (the lowest rank, the leftmost on ties), then its new pairs
//   with its neighbours join the heap, and the top is taken again;
// - GPT-2's encoder.py merges every occurrence of the top pair (all entries of its rank: a rank
//   is one merge line), left to right, before the pairs those merges make join the heap. Taking
//   them one at a time instead would differ where a merge line uses a token before the line
//   that makes it.
struct BpeTokenizer::MergeScratch {
  struct Part {
    int32_t id, prev, next;  // prev, next: offsets of the neighbours, -1 at the ends
    bool alive;
  };
  struct Candidate {
    int32_t rank, left, right, left_id, right_id, merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::vector<Part> parts;
  std::vector<Candidate> heap, batch;
  std::vector<int32_t> merged;  // offsets of the parts the batch merged into
};

BpeTokenizer BpeTokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  ZDL_CHECK(fs::exists(path, ec), "no tokenizer at '", path,
            "': give a directory holding GPT-2's encoder.json and vocab.bpe, or a .tiktoken file");
  const fs::path p(path);
  const bool is_dir = fs::is_directory(p, ec);
  if (!is_dir && p.filename() != "encoder.json" && p.filename() != "vocab.bpe") return from_tiktoken(path);
  const fs::path base = is_dir ? p : p.has_parent_path() ? p.parent_path() : fs::path(".");
  for (const char* name : {"encoder.json", "vocab.bpe"})
    ZDL_CHECK(fs::exists(base / name, ec), "the tokenizer directory '", base.string(), "' holds no ", name,
              " (GPT-2's format is encoder.json + vocab.bpe; a .tiktoken file is given by its own path)");
  return from_gpt2_files((base / "encoder.json").string(), (base / "vocab.bpe").string());
}

BpeTokenizer BpeTokenizer::from_gpt2_files(const std::string& encoder_json, const std::string& vocab_bpe) {
  using json = nlohmann::json;
  BpeTokenizer t;
  t.source_ = encoder_json + " + " + vocab_bpe;
  // ---- encoder.json: {"token in GPT-2's byte alphabet": id, ...} ----
  {
    const MappedFile f = tokenizer_file(encoder_json);
    const std::string where = at(encoder_json);
    std::unordered_set<std::string> keys;  // a repeated key would silently replace the first
    json::parser_callback_t check_repeats = [&](int depth, json::parse_event_t event, json& parsed) {
      if (depth == 1 && event == json::parse_event_t::key)
        ZDL_CHECK(keys.insert(parsed.get<std::string>()).second, where, ": the token '",
                  shown(parsed.get<std::string>()), "' appears twice");
      return true;
    };
    json j;
    try {
      j = json::parse(f.data(), f.data() + f.size(), check_repeats);
    } catch (const json::exception& e) {
      ZDL_CHECK(false, where, " is not valid JSON: ", e.what());
    }
    ZDL_CHECK(j.is_object() && !j.empty(), where, " must be a JSON object mapping tokens to ids, got ",
              j.is_object() ? "an empty object" : j.type_name());
    const size_t n = j.size();
    ZDL_CHECK(n <= kMaxTokens, where, " holds ", n, " tokens, more than the ", kMaxTokens, " zerodl reads");
    t.tokens_.resize(n);
    for (const auto& [key, value] : j.items()) {
      ZDL_CHECK(value.is_number_integer() && value.get<int64_t>() >= 0 && value.get<int64_t>() < static_cast<int64_t>(n),
                where, ": the token '", shown(key), "' has the id ", io::json_shown(value), ", not an integer in ", id_range(n));
      ZDL_CHECK(!key.empty(), where, ": a token is empty (id ", io::json_shown(value), ")");
      const int64_t id = value.get<int64_t>();
      std::string bytes = alphabet_to_bytes(key, where);
      ZDL_CHECK(t.tokens_[id].empty(), where, ": the id ", id, " belongs to two tokens, '", shown(t.tokens_[id]),
                "' and '", shown(bytes), "'");
      t.tokens_[id] = bytes;
      t.ids_.emplace(std::move(bytes), static_cast<int32_t>(id));
    }
  }
  // ---- vocab.bpe: "#version: 0.2", then one merge "left right" per line, in priority order ----
  const MappedFile f = tokenizer_file(vocab_bpe);
  const std::vector<std::string_view> lines = lines_of(f);
  ZDL_CHECK(lines[0].starts_with("#version"), at(vocab_bpe, 1), ": expected GPT-2's '#version: 0.2' line, got '",
            shown(lines[0]), "'");
  std::unordered_map<uint64_t, int64_t> line_of;  // pair -> its line, for repeats
  for (size_t i = 1; i < lines.size(); ++i) {
    const int64_t line = static_cast<int64_t>(i) + 1;
    const std::string where = at(vocab_bpe, line);
    const std::string_view text = lines[i];
    const size_t space = text.find(' ');
    ZDL_CHECK(space != std::string_view::npos && space > 0 && space + 1 < text.size() &&
                  text.find(' ', space + 1) == std::string_view::npos,
              where, ": expected a merge, two tokens separated by one space, got '", shown(text), "'");
    int32_t parts[2];
    for (int k = 0; k < 2; ++k) {
      const std::string_view part = k == 0 ? text.substr(0, space) : text.substr(space + 1);
      parts[k] = t.id_of(alphabet_to_bytes(part, where));
      ZDL_CHECK(parts[k] >= 0, where, ": the merge '", shown(text), "' uses '", shown(part), "', which is not in ",
                at(encoder_json));
    }
    const int32_t merged = t.id_of(t.tokens_[parts[0]] + t.tokens_[parts[1]]);
    ZDL_CHECK(merged >= 0, where, ": the merge '", shown(text), "' makes '",
              shown(t.tokens_[parts[0]] + t.tokens_[parts[1]]), "', which is not in ", at(encoder_json));
    const uint64_t key = static_cast<uint64_t>(parts[0]) << 32 | static_cast<uint32_t>(parts[1]);
    const auto [first, fresh] = line_of.emplace(key, line);
    ZDL_CHECK(fresh, where, ": the merge '", shown(text), "' repeats line ", first->second);
    t.merges_.emplace(key, Merge{static_cast<int32_t>(i), merged});
  }
  check_every_token_is_reachable(t.tokens_, lines.size() - 1, encoder_json, vocab_bpe);
  t.finish();
  return t;
}

BpeTokenizer BpeTokenizer::from_tiktoken(const std::string& path) {
  BpeTokenizer t;
  t.source_ = path;
  t.rule_ = MergeRule::Tiktoken;
  const MappedFile f = tokenizer_file(path);
  const std::vector<std::string_view> lines = lines_of(f);
  const size_t n = lines.size();  // one token a line
  ZDL_CHECK(n <= kMaxTokens, at(path), " holds ", n, " tokens, more than the ", kMaxTokens, " zerodl reads");
  t.tokens_.resize(n);
  std::vector<int64_t> line_of_rank(n);
  std::unordered_map<int64_t, int64_t> beyond;  // rank >= n -> its line: then some rank below n is missing
  for (size_t i = 0; i < n; ++i) {
    const int64_t line = static_cast<int64_t>(i) + 1;
    const std::string where = at(path, line);
    const std::string_view text = lines[i];
    const size_t space = text.find(' ');
    ZDL_CHECK(space != std::string_view::npos && text.find(' ', space + 1) == std::string_view::npos, where,
              ": expected tiktoken's 'base64(token) rank', got '", shown(text), "'");
    const std::optional<std::string> bytes = base64_decode(text.substr(0, space));
    ZDL_CHECK(bytes && !bytes->empty(), where, ": '", shown(text.substr(0, space)), "' is not the base64 of a token");
    const std::string_view digits = text.substr(space + 1);
    int64_t rank = -1;
    const auto [end, err] = std::from_chars(digits.data(), digits.data() + digits.size(), rank);
    ZDL_CHECK(err == std::errc() && end == digits.data() + digits.size() && rank >= 0 &&
                  rank < static_cast<int64_t>(kMaxTokens),
              where, ": the rank '", shown(digits), "' is not an integer in ", id_range(n));
    if (rank >= static_cast<int64_t>(n)) {  // named with the gap it leaves, below
      const auto [first, fresh] = beyond.emplace(rank, line);
      ZDL_CHECK(fresh, where, ": the rank ", rank, " repeats line ", first->second);
      continue;
    }
    ZDL_CHECK(line_of_rank[rank] == 0, where, ": the rank ", rank, " repeats line ", line_of_rank[rank]);
    line_of_rank[rank] = line;
    const auto [same, new_token] = t.ids_.emplace(*bytes, static_cast<int32_t>(rank));
    ZDL_CHECK(new_token, where, ": the token '", shown(*bytes), "' repeats line ", line_of_rank[same->second]);
    t.tokens_[rank] = *bytes;
  }
  if (!beyond.empty()) {  // n lines, a rank past n - 1, no repeat: a rank below n is missing
    const int64_t gap = std::find(line_of_rank.begin(), line_of_rank.end(), 0) - line_of_rank.begin();
    const int64_t expected = gap == 0 ? 1 : line_of_rank[gap - 1] + 1;  // ranks are listed in order
    std::string holds = "past the end of the file";
    if (expected <= static_cast<int64_t>(n)) {
      const auto rank_at = std::find(line_of_rank.begin(), line_of_rank.end(), expected);
      const auto past = std::find_if(beyond.begin(), beyond.end(), [&](const auto& e) { return e.second == expected; });
      holds = detail::str("holds the rank ", rank_at != line_of_rank.end() ? rank_at - line_of_rank.begin()
                                                                          : past->first);
    }
    ZDL_CHECK(false, at(path, expected), ": the rank ", gap, " is missing (ranks run from 0 with no gap, one a line; ",
              "this line, where it belongs", gap > 0 ? detail::str(" after the rank ", gap - 1) : std::string(), ", ",
              holds, "); the file's ", n, " lines hold ranks up to ",
              std::max_element(beyond.begin(), beyond.end())->first);
  }
  // tiktoken's rule: the pair whose concatenation is a token, ranked by that token. Every way
  // of cutting each token in two tokens is such a pair.
  for (size_t id = 0; id < t.tokens_.size(); ++id) {
    const std::string_view s = t.tokens_[id];
    for (size_t k = 1; k < s.size(); ++k) {
      const int32_t left = t.id_of(s.substr(0, k)), right = t.id_of(s.substr(k));
      if (left >= 0 && right >= 0)
        t.merges_.emplace(static_cast<uint64_t>(left) << 32 | static_cast<uint32_t>(right),
                          Merge{static_cast<int32_t>(id), static_cast<int32_t>(id)});
    }
  }
  if (t.id_of(kEndOfText) < 0) t.tokens_.emplace_back(kEndOfText);  // a special token: never merged into
  t.finish();
  return t;
}

int32_t BpeTokenizer::id_of(std::string_view bytes) const {
  const auto it = ids_.find(bytes);
  return it == ids_.end() ? -1 : it->second;
}

void BpeTokenizer::finish() {
  for (int b = 0; b < 256; ++b) {
    byte_ids_[b] = id_of(std::string(1, static_cast<char>(b)));
    ZDL_CHECK(byte_ids_[b] >= 0, "the tokenizer ", at(source_), " has no token for the byte 0x", std::hex, b,
              std::dec, ": byte-level BPE starts from single bytes, so its vocabulary must hold all 256");
  }
  const auto it = std::find(tokens_.begin(), tokens_.end(), kEndOfText);
  if (it != tokens_.end()) eot_ = it - tokens_.begin();
}

std::optional<int64_t> BpeTokenizer::eot_id() const { return eot_ >= 0 ? std::optional<int64_t>(eot_) : std::nullopt; }

std::vector<int64_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size() / 3);
  MergeScratch scratch;
  for (size_t begin = 0; begin < text.size();) {
    const size_t end = gpt2_pretoken_end(text, begin);
    encode_piece(text.substr(begin, end - begin), scratch, ids);
    begin = end;
  }
  return ids;
}

void BpeTokenizer::encode_piece(std::string_view piece, MergeScratch& s, std::vector<int64_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_ids_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  if (rule_ == MergeRule::Tiktoken) {
    if (const int32_t id = id_of(piece); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  // [Note: merging a pre-token]
  ZDL_CHECK(piece.size() < (size_t{1} << 31), "BpeTokenizer::encode: a pre-token of ", piece.size(),
            " bytes (one run of letters, digits, punctuation or white space) is longer than 2^31 - 1");
  const int32_t n = static_cast<int32_t>(piece.size());
  s.parts.resize(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i)
    s.parts[i] = {byte_ids_[static_cast<uint8_t>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1, true};
  s.heap.clear();
  auto consider = [&](int32_t left) {
    const int32_t right = s.parts[left].next;
    if (right < 0) return;
    const int32_t a = s.parts[left].id, b = s.parts[right].id;
    const auto m = merges_.find(static_cast<uint64_t>(a) << 32 | static_cast<uint32_t>(b));
    if (m == merges_.end()) return;
    s.heap.push_back({m->second.rank, left, right, a, b, m->second.id});
    std::push_heap(s.heap.begin(), s.heap.end(), std::greater<>());
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);
  auto pop = [&] {
    std::pop_heap(s.heap.begin(), s.heap.end(), std::greater<>());
    s.batch.push_back(s.heap.back());
    s.heap.pop_back();
  };
  while (!s.heap.empty()) {
    s.batch.clear();
    pop();
    if (rule_ == MergeRule::Gpt2)
      while (!s.heap.empty() && s.heap.front().rank == s.batch[0].rank) pop();
    s.merged.clear();
    for (const MergeScratch::Candidate& c : s.batch) {
      MergeScratch::Part& left = s.parts[c.left];
      if (!left.alive || left.next != c.right || left.id != c.left_id || s.parts[c.right].id != c.right_id) continue;
      left.id = c.merged;
      s.parts[c.right].alive = false;
      left.next = s.parts[c.right].next;
      if (left.next >= 0) s.parts[left.next].prev = c.left;
      s.merged.push_back(c.left);
    }
    for (int32_t at : s.merged) {
      if (s.parts[at].prev >= 0) consider(s.parts[at].prev);
      consider(at);
    }
  }
  for (int32_t i = 0; i >= 0; i = s.parts[i].next) out.push_back(s.parts[i].id);
}

std::string BpeTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    ZDL_CHECK(ids[i] >= 0 && ids[i] < vocab_size(), "BpeTokenizer::decode: id ", ids[i], " at position ", i,
              " is outside the vocabulary [0, ", vocab_size(), ") of ", at(source_));
    out += tokens_[static_cast<size_t>(ids[i])];
  }
  return out;
}

}  // namespace zdl::data

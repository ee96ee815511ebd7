// BpeTokenizer and GPT-2's pre-tokenizer on vocabularies the tests write themselves, in both
// formats (GPT-2's encoder.json + vocab.bpe, tiktoken's .tiktoken): hand-checked pieces and
// ids, exact round trips of any bytes, the two formats giving the same ids, GPT-2's own
// encoder.py (Python, where the regex module is installed) giving them too, and every
// malformed file an error naming the file and line.
#include "data/bpe_tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "data/gpt2_pretokenizer.h"
#include "data/unicode_classes.h"
#include "error_of.h"
#include "skip_unless_ci.h"
#include "temp_dir.h"

namespace zdl::data {

namespace {

using ::zdl::testing::error_of;
using ::zdl::testing::TempDir;

// A vocabulary as the tests write it: ids 0-255 are the bytes 0-255, id 256 + k is made by
// merge k, and <|endoftext|> (if any) comes last.
struct Vocab {
  std::vector<std::string> tokens;
  std::vector<std::pair<int, int>> merges;
  bool eot = true;

  Vocab() {
    for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  }
  int merge(int a, int b) {
    merges.emplace_back(a, b);
    tokens.push_back(tokens[a] + tokens[b]);
    return static_cast<int>(tokens.size()) - 1;
  }
  int id(const std::string& s) const {
    return static_cast<int>(std::find(tokens.begin(), tokens.end(), s) - tokens.begin());
  }
  int merge(const std::string& a, const std::string& b) { return merge(id(a), id(b)); }
  int64_t eot_id() const { return static_cast<int64_t>(tokens.size()); }
};

// GPT-2's bytes_to_unicode (encoder.py), written out independently of the library's.
std::string in_gpt2_alphabet(const std::string& bytes) {
  std::map<int, int> cp;
  int next = 256;
  for (int b = 0; b < 256; ++b)
    cp[b] = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255) ? b : next++;
  std::string out;
  for (unsigned char c : bytes) {
    const int u = cp[c];
    if (u < 0x80) {
      out += static_cast<char>(u);
    } else {
      out += static_cast<char>(0xC0 | u >> 6);
      out += static_cast<char>(0x80 | (u & 0x3F));
    }
  }
  return out;
}

std::string base64(const std::string& bytes) {
  const char* abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = 0;
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    for (size_t k = 0; k < 3; ++k) v = v << 8 | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0);
    for (size_t k = 0; k < 4; ++k) out += k <= n ? abc[(v >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

std::string encoder_json(const Vocab& v) {
  nlohmann::json j = nlohmann::json::object();
  for (size_t i = 0; i < v.tokens.size(); ++i) j[in_gpt2_alphabet(v.tokens[i])] = i;
  if (v.eot) j["<|endoftext|>"] = v.eot_id();
  return j.dump();
}

std::string vocab_bpe(const Vocab& v) {
  std::string out = "#version: 0.2\n";
  for (auto [a, b] : v.merges) out += in_gpt2_alphabet(v.tokens[a]) + " " + in_gpt2_alphabet(v.tokens[b]) + "\n";
  return out;
}

std::string tiktoken_file(const Vocab& v) {
  std::string out;
  for (size_t i = 0; i < v.tokens.size(); ++i) out += base64(v.tokens[i]) + " " + std::to_string(i) + "\n";
  return out;
}

// Writes both formats under `dir`: dir/gpt2/{encoder.json,vocab.bpe} and dir/vocab.tiktoken.
void write_both(const TempDir& dir, const Vocab& v) {
  std::filesystem::create_directories(dir / "gpt2");
  dir.write("gpt2/encoder.json", encoder_json(v));
  dir.write("gpt2/vocab.bpe", vocab_bpe(v));
  dir.write("vocab.tiktoken", tiktoken_file(v));
}

// A small hand-made vocabulary whose ids the tests below work out by hand.
Vocab hand_vocab() {
  Vocab v;
  v.merge("h", "e");       // 256 he
  v.merge("l", "l");       // 257 ll
  v.merge("he", "ll");     // 258 hell
  v.merge("hell", "o");    // 259 hello
  v.merge(" ", "w");       // 260 " w"
  v.merge("o", "r");       // 261 or
  v.merge(" w", "or");     // 262 " wor"
  v.merge("l", "d");       // 263 ld
  v.merge(" wor", "ld");   // 264 " world"
  v.merge("'", "s");       // 265 's
  v.merge("1", "2");       // 266 12
  v.merge(" ", " ");       // 267 "  "
  return v;                // <|endoftext|> 268
}

// Text with the structure a BPE learns from: words (fixed ones, and made-up ones of a few
// syllables, some not ASCII), contractions, numbers, punctuation, white space of several kinds
// (a fixed LCG: the same text every run).
std::string generated_text(int words, uint64_t seed) {
  const char* fixed[] = {"the", "don't", "we'll", "they're", "I'm", "it's", "2024", "3.14", "42", "Straße", "日本語",
                         "ελληνικά", "٣٤٥", "(x)", "--", "...", "!", "😀", "e\u0301"};
  const char* syllables[] = {"ka", "ri", "to", "mon", "ul", "sh", "é", "an", "ter", "in", "go", "ß", "λα", "の", "x"};
  const char* gaps[] = {" ", " ", " ", " ", "  ", "\n", "\n\n", "\t", ", ", ". ", " \n", "\u00a0", "\u3000"};
  std::string out;
  uint64_t s = seed;
  auto draw = [&](uint64_t n) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return (s >> 33) % n;
  };
  for (int i = 0; i < words; ++i) {
    if (draw(3) == 0) {
      out += fixed[draw(std::size(fixed))];
    } else {
      for (uint64_t k = 0, n = 1 + draw(4); k < n; ++k) out += syllables[draw(std::size(syllables))];
    }
    out += gaps[draw(std::size(gaps))];
  }
  return out;
}

// A tiny BPE trainer: words are GPT-2's pre-tokens of `text`; each step merges the most
// frequent adjacent pair (the smallest ids on ties) in every word.
Vocab train(const std::string& text, int merges) {
  Vocab v;
  std::map<std::string, int64_t> counts;
  for (size_t i = 0; i < text.size();) {
    const size_t end = gpt2_pretoken_end(text, i);
    ++counts[text.substr(i, end - i)];
    i = end;
  }
  std::vector<std::pair<std::vector<int>, int64_t>> words;
  for (const auto& [w, n] : counts) {
    std::vector<int> ids;
    for (unsigned char c : w) ids.push_back(c);
    words.emplace_back(ids, n);
  }
  for (int m = 0; m < merges; ++m) {
    std::map<std::pair<int, int>, int64_t> pairs;
    for (const auto& [ids, n] : words)
      for (size_t i = 0; i + 1 < ids.size(); ++i) pairs[{ids[i], ids[i + 1]}] += n;
    if (pairs.empty()) break;
    const auto best = std::max_element(pairs.begin(), pairs.end(),
                                       [](const auto& a, const auto& b) { return a.second < b.second; });
    const auto [a, b] = best->first;
    const int made = v.merge(a, b);
    for (auto& [ids, n] : words) {
      std::vector<int> merged;
      for (size_t i = 0; i < ids.size(); ++i) {
        if (i + 1 < ids.size() && ids[i] == a && ids[i + 1] == b) {
          merged.push_back(made);
          ++i;
        } else {
          merged.push_back(ids[i]);
        }
      }
      ids = merged;
    }
  }
  return v;
}

std::vector<std::string> pieces(std::string_view text) {
  std::vector<std::string> out;
  for (size_t i = 0; i < text.size();) {
    const size_t end = gpt2_pretoken_end(text, i);
    out.emplace_back(text.substr(i, end - i));
    i = end;
  }
  return out;
}

// Texts every round trip covers: ASCII, multi-byte UTF-8, invalid UTF-8, white space runs,
// contractions, digits, every byte value.
std::vector<std::string> tricky_texts() {
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes += static_cast<char>(b);
  return {"",
          "hello world",
          "Hello, World! It's 2024; we'll see.",
          "  leading, trailing and   inner   spaces  ",
          "tabs\tand\nnewlines\n\n\nand \r\n CRLF \n",
          "I'm you're he's she'd we've they'll DON'T 'tis ''",
          "0123456789 3.14159 1,000,000 ٣٤٥ ½ Ⅻ",
          "naïve café Straße 日本語 ελληνικά 😀👍🏽 e\u0301",
          "\u00a0nbsp\u3000ideographic\u2028line\u2029para\u0085next",
          "invalid: \xff\xfe \xc3 \xc0\xaf \xed\xa0\x80 \xf4\x90\x80\x80 \x80" "abc \xe2\x82",
          "=================================================== long runs aaaaaaaaaaaaaaaa",
          all_bytes};
}

void expect_has(const std::string& msg, std::initializer_list<std::string> needles) {
  EXPECT_FALSE(msg.empty()) << "no error";
  for (const std::string& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "no '" << n << "' in: " << msg;
}

}  // namespace

TEST(Gpt2Pretokenizer, SplitsAsGpt2sRegex) {
  // Each worked out from the pattern's alternatives, in order, at each position.
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"Hello world", {"Hello", " world"}},
      {"I'm  here", {"I", "'m", " ", " here"}},         // a run of spaces leaves one to the word
      {"a   b", {"a", "  ", " b"}},
      {"a \n b", {"a", " \n", " b"}},
      {"x  ", {"x", "  "}},                              // at the end, the whole run
      {"don't they're", {"don", "'t", " they", "'re"}},
      {"DON'T", {"DON", "'", "T"}},                      // contractions are lower-case only
      {"abc123def", {"abc", "123", "def"}},
      {" 123 $$$ ...", {" 123", " $$$", " ..."}},
      {"naïve café", {"naïve", " café"}},
      {"٣٤٥ apples", {"٣٤٥", " apples"}},                // Arabic-Indic digits are numbers
      {"\u00a0x", {"\u00a0", "x"}},                      // only U+0020 joins the word after it
      {"a\u3000\u3000b", {"a", "\u3000", "\u3000", "b"}},
      {"e\u0301!", {"e", "\u0301!"}},                    // a combining mark is neither letter nor number
      {"a\xff" "b", {"a", "\xff", "b"}},                 // invalid UTF-8: one byte, like punctuation
      {" \xff\xfe!", {" \xff\xfe!"}},
      {"caf\xc3", {"caf", "\xc3"}},                      // truncated sequence
      {"\xc0\xaf\xed\xa0\x80x", {"\xc0\xaf\xed\xa0\x80", "x"}},  // overlong form, surrogate
  };
  for (const auto& [text, want] : cases) EXPECT_EQ(pieces(text), want) << text;
  EXPECT_EQ(unicode_class(U'é'), UnicodeClass::Letter);
  EXPECT_EQ(unicode_class(0x0663), UnicodeClass::Number);
  EXPECT_EQ(unicode_class(0x3000), UnicodeClass::Space);
  EXPECT_EQ(unicode_class(0x1C), UnicodeClass::Other);  // str.isspace() says yes; \s says no
  EXPECT_EQ(unicode_class(0x110000), UnicodeClass::Other);
}

TEST(BpeTokenizer, EncodesHandCheckedCasesInBothFormats) {
  TempDir dir;
  const Vocab v = hand_vocab();
  write_both(dir, v);
  for (const std::string& path : {dir / "gpt2", dir / "gpt2/vocab.bpe", dir / "gpt2/encoder.json", dir / "vocab.tiktoken"}) {
    SCOPED_TRACE(path);
    const BpeTokenizer tok = BpeTokenizer::load(path);
    EXPECT_EQ(tok.vocab_size(), 269);
    EXPECT_EQ(tok.eot_id(), 268);
    using Ids = std::vector<int64_t>;
    EXPECT_EQ(tok.encode("hello world"), (Ids{259, 264}));
    EXPECT_EQ(tok.encode("hello  world"), (Ids{259, 32, 264}));
    EXPECT_EQ(tok.encode("Hello"), (Ids{'H', 'e', 257, 'o'}));  // no (H, e) merge
    EXPECT_EQ(tok.encode("it's"), (Ids{'i', 't', 265}));
    EXPECT_EQ(tok.encode("123"), (Ids{266, '3'}));
    EXPECT_EQ(tok.encode("   x"), (Ids{267, ' ', 'x'}));
    EXPECT_EQ(tok.encode("llll"), (Ids{257, 257}));
    EXPECT_EQ(tok.encode("lll"), (Ids{257, 'l'}));  // the leftmost pair first
    EXPECT_EQ(tok.encode("<|endoftext|>").size(), 13u);  // text, not the special token
    EXPECT_EQ(tok.decode({259, 264, 268}), "hello world<|endoftext|>");
  }
}

TEST(BpeTokenizer, RoundTripsAnyBytesAndBothFormatsGiveTheSameIds) {
  TempDir dir;
  const std::string text = generated_text(3000, 7);
  const Vocab v = train(text, 300);
  ASSERT_EQ(v.merges.size(), 300u);
  write_both(dir, v);
  const BpeTokenizer gpt2 = BpeTokenizer::load(dir / "gpt2");
  const BpeTokenizer tik = BpeTokenizer::load(dir / "vocab.tiktoken");
  EXPECT_EQ(gpt2.vocab_size(), 257 + 300);
  EXPECT_EQ(tik.vocab_size(), gpt2.vocab_size());
  std::vector<std::string> texts = tricky_texts();
  texts.push_back(text);
  texts.push_back(generated_text(500, 99));  // unseen
  for (const std::string& t : texts) {
    const std::vector<int64_t> ids = gpt2.encode(t);
    EXPECT_EQ(tik.encode(t), ids) << t;
    EXPECT_EQ(gpt2.decode(ids), t);
    EXPECT_EQ(tik.decode(ids), t);
  }
  // The merges apply: far fewer tokens than bytes on the text they were learned from (2.8 bytes
  // a token).
  EXPECT_LT(gpt2.encode(text).size(), text.size() / 2);
}

// The text can be cut just after a '\n' between two ASCII non-spaces (to encode a long one piece
// by piece) and nowhere in a white space run: ids of the pieces are the ids of the whole.
TEST(BpeTokenizer, SplitPointsKeepTheIds) {
  const std::string s = "ab\ncd\n ef\n\ngh";
  EXPECT_EQ(gpt2_split_point(s, 0), 3u);
  EXPECT_EQ(gpt2_split_point(s, 4), s.size());  // "d\n ", "f\n\n", "\n\ng": white space beside
  TempDir dir;
  const std::string text = generated_text(2000, 3) + "\nend\nx";
  write_both(dir, train(text, 200));
  const BpeTokenizer tok = BpeTokenizer::load(dir / "vocab.tiktoken");
  const std::vector<int64_t> whole = tok.encode(text);
  std::vector<int64_t> joined;
  int cuts = 0;
  for (size_t begin = 0; begin < text.size(); ++cuts) {
    const size_t end = gpt2_split_point(text, begin + 1);
    const std::vector<int64_t> part = tok.encode(std::string_view(text).substr(begin, end - begin));
    joined.insert(joined.end(), part.begin(), part.end());
    begin = end;
  }
  EXPECT_GT(cuts, 20);
  EXPECT_EQ(joined, whole);
}

TEST(BpeTokenizer, DecodeRejectsIdsOutsideTheVocabulary) {
  TempDir dir;
  write_both(dir, hand_vocab());
  const BpeTokenizer tok = BpeTokenizer::load(dir / "vocab.tiktoken");
  expect_has(error_of([&] { tok.decode({104, 105, 269}); }), {"id 269 at position 2", "[0, 269)", "vocab.tiktoken"});
  expect_has(error_of([&] { tok.decode({-1}); }), {"id -1 at position 0"});
}

// GPT-2's encoder.py as released (its regex, bytes_to_unicode and bpe loop), run by Python on
// the same files: the ids must be the library's. Needs Debian's python3-regex (scripts/setup.sh).
constexpr const char* kGpt2EncoderPy = R"PY(
import json, sys, regex as re
def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~")+1))+list(range(ord("¡"), ord("¬")+1))+list(range(ord("®"), ord("ÿ")+1))
    cs = bs[:]
    n = 0
    for b in range(2**8):
        if b not in bs:
            bs.append(b)
            cs.append(2**8+n)
            n += 1
    return dict(zip(bs, [chr(n) for n in cs]))
def get_pairs(word):
    return set(zip(word, word[1:]))
d = sys.argv[1]
encoder = json.load(open(d + "/encoder.json", encoding="utf-8"))
merges = [tuple(l.split()) for l in open(d + "/vocab.bpe", encoding="utf-8").read().split("\n")[1:-1]]
ranks = dict(zip(merges, range(len(merges))))
b2u = bytes_to_unicode()
pat = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
def bpe(token):
    word = tuple(token)
    pairs = get_pairs(word)
    if not pairs:
        return token
    while True:
        bigram = min(pairs, key=lambda pair: ranks.get(pair, float('inf')))
        if bigram not in ranks:
            break
        first, second = bigram
        new_word = []
        i = 0
        while i < len(word):
            try:
                j = word.index(first, i)
            except ValueError:
                new_word.extend(word[i:])
                break
            new_word.extend(word[i:j])
            i = j
            if word[i] == first and i < len(word)-1 and word[i+1] == second:
                new_word.append(first+second)
                i += 2
            else:
                new_word.append(word[i])
                i += 1
        word = tuple(new_word)
        if len(word) == 1:
            break
        pairs = get_pairs(word)
    return ' '.join(word)
text = open(sys.argv[2], encoding="utf-8", newline="").read()
for token in re.findall(pat, text):
    token = ''.join(b2u[b] for b in token.encode('utf-8'))
    print(' '.join(str(encoder[t]) for t in bpe(token).split(' ')))
)PY";

TEST(BpeTokenizer, MatchesGpt2sEncoderPy) {
  if (std::system("/usr/bin/python3 -c 'import regex' >/dev/null 2>&1") != 0)
    ZDL_SKIP_UNLESS_CI() << "/usr/bin/python3 with the regex module (Debian's python3-regex) is not available";
  TempDir dir;
  const std::string learned = generated_text(3000, 11);
  write_both(dir, train(learned, 300));
  // Valid UTF-8 only (Python reads str): everything tricky_texts holds but the invalid bytes.
  std::string text = learned + generated_text(800, 12);
  for (const std::string& t : tricky_texts())
    if (t.find("invalid") == std::string::npos && t.size() != 256) text += t;
  dir.write("text.txt", text);
  dir.write("encoder.py", kGpt2EncoderPy);
  auto encoder_py = [&](const std::string& vocab_dir) {
    const std::string out = dir / "ids.txt";
    const int rc = std::system(
        ("/usr/bin/python3 " + (dir / "encoder.py") + " " + vocab_dir + " " + (dir / "text.txt") + " > " + out + " 2>&1")
            .c_str());
    const std::string printed = testing::read_bytes(out);
    EXPECT_EQ(rc, 0) << printed;
    std::vector<int64_t> ids;
    std::istringstream in(printed);
    for (int64_t id; in >> id;) ids.push_back(id);
    return ids;
  };
  const std::vector<int64_t> want = encoder_py(dir / "gpt2");
  ASSERT_GT(want.size(), 1000u);
  EXPECT_EQ(BpeTokenizer::load(dir / "gpt2").encode(text), want);
  EXPECT_EQ(BpeTokenizer::load(dir / "vocab.tiktoken").encode(text), want);
  // Merge lines in another order than learned (the later half first, each half reversed): other
  // ids, still encoder.py's, whose rule merges every occurrence of a pair before the next pair.
  const std::string bpe = testing::read_bytes(dir / "gpt2/vocab.bpe");
  std::vector<std::string> lines;
  std::istringstream merges(bpe.substr(bpe.find('\n') + 1));
  for (std::string line; std::getline(merges, line);) lines.push_back(line);
  const auto half = lines.begin() + static_cast<int64_t>(lines.size() / 2);
  std::reverse(lines.begin(), half);
  std::reverse(half, lines.end());
  std::rotate(lines.begin(), half, lines.end());
  std::string shuffled = "#version: 0.2\n";
  for (const std::string& line : lines) shuffled += line + "\n";
  std::filesystem::create_directories(dir / "shuffled");
  std::filesystem::copy_file(dir / "gpt2/encoder.json", dir / "shuffled/encoder.json");
  dir.write("shuffled/vocab.bpe", shuffled);
  const std::vector<int64_t> want_shuffled = encoder_py(dir / "shuffled");
  EXPECT_NE(want_shuffled, want);
  EXPECT_EQ(BpeTokenizer::load(dir / "shuffled").encode(text), want_shuffled);
}

TEST(BpeTokenizer, MalformedGpt2FilesAreErrorsNamingFileAndLine) {
  TempDir dir;
  const Vocab v = hand_vocab();
  std::filesystem::create_directories(dir / "gpt2");
  const std::string enc = dir / "gpt2/encoder.json", bpe = dir / "gpt2/vocab.bpe";
  const std::string good_enc = encoder_json(v), good_bpe = vocab_bpe(v);
  auto with = [&](const std::string& e, const std::string& b) {
    testing::write_bytes(enc, e);
    testing::write_bytes(bpe, b);
    return error_of([&] { BpeTokenizer::load(dir / "gpt2"); });
  };
  ASSERT_EQ(with(good_enc, good_bpe), "");
  expect_has(error_of([&] { BpeTokenizer::load(dir / "nothing"); }), {"no tokenizer at", "nothing"});
  std::filesystem::create_directories(dir / "half");
  dir.write("half/encoder.json", good_enc);
  expect_has(error_of([&] { BpeTokenizer::load(dir / "half"); }), {"half", "holds no vocab.bpe"});

  // encoder.json
  expect_has(with("{\"a\": 1,", good_bpe), {"encoder.json", "is not valid JSON", "line 1"});
  expect_has(with("[1, 2]", good_bpe), {"encoder.json", "must be a JSON object", "array"});
  nlohmann::json j = nlohmann::json::parse(good_enc);
  auto edited = [&](auto&& edit) {
    nlohmann::json e = j;
    edit(e);
    return e.dump();
  };
  expect_has(with(edited([](auto& e) { e["hell"] = "258"; }), good_bpe), {"encoder.json", "'hell'", "the id \"258\""});
  expect_has(with(edited([](auto& e) { e["hell"] = -3; }), good_bpe), {"'hell' has the id -3"});
  expect_has(with(good_enc.substr(0, good_enc.size() - 1) + ",\"hell\":258}", good_bpe), {"'hell' appears twice"});
  expect_has(with(edited([](auto& e) { e["hell"] = 259; }), good_bpe), {"the id 259 belongs to two tokens", "hello"});
  expect_has(with(edited([](auto& e) { e["<|endoftext|>"] = 300; }), good_bpe),
             {"encoder.json", "'<|endoftext|>' has the id 300, not an integer in [0, 269)"});
  expect_has(with(edited([](auto& e) {
               e.erase("<|endoftext|>");
               e["a b"] = 268;
             }),
                  good_bpe),
             {"'a b' holds U+0020", "not one of GPT-2's 256 byte characters"});
  expect_has(with(edited([](auto& e) {
               e.erase("<|endoftext|>");
               e.erase("z");
               e[in_gpt2_alphabet("zz")] = 122;  // the id 'z' had
             }),
                  good_bpe),
             {"no token for the byte 0x7a", "all 256"});

  // vocab.bpe
  const size_t first_merge = good_bpe.find('\n') + 1;
  const std::string merges = good_bpe.substr(first_merge);
  expect_has(with(good_enc, merges), {"vocab.bpe' line 1", "#version"});
  expect_has(with(good_enc, good_bpe + "a b c\n"), {"vocab.bpe' line 14", "expected a merge", "'a b c'"});
  expect_has(with(good_enc, good_bpe + "ab\n"), {"line 14", "expected a merge"});
  expect_has(with(good_enc, good_bpe + "\n"), {"line 14", "expected a merge"});
  expect_has(with(good_enc, good_bpe + "wor ld\n"), {"line 14", "uses 'wor', which is not in", "encoder.json"});
  expect_has(with(good_enc, good_bpe + "x y\n"), {"line 14", "makes 'xy', which is not in"});
  expect_has(with(good_enc, good_bpe + "h e\n"), {"line 14", "'h e' repeats line 2"});
  expect_has(with(good_enc, good_bpe + "h\xff e\n"), {"line 14", "is not UTF-8"});
  expect_has(with("", good_bpe), {"the tokenizer file '" + enc + "' is empty"});
  expect_has(with(good_enc, ""), {"the tokenizer file '" + bpe + "' is empty"});
}

// vocab.bpe cut short at a line boundary parses line by line; the count gives it away: the
// tokens of encoder.json must be the 256 bytes, one per merge and the specials.
TEST(BpeTokenizer, AVocabularyWithTokensNoMergeMakesIsRefused) {
  TempDir dir;
  const Vocab v = train(generated_text(3000, 5), 200);
  write_both(dir, v);
  ASSERT_EQ(BpeTokenizer::load(dir / "gpt2").vocab_size(), 256 + 200 + 1);
  const std::string bpe = testing::read_bytes(dir / "gpt2/vocab.bpe");
  size_t cut = 0;
  for (int line = 0; line < 1 + 108; ++line) cut = bpe.find('\n', cut) + 1;
  dir.write("gpt2/vocab.bpe", bpe.substr(0, cut));  // 108 of the 200 merges
  expect_has(error_of([&] { BpeTokenizer::load(dir / "gpt2"); }),
             {"encoder.json' holds 457 tokens", "vocab.bpe' 108 merges", "1 special token(s), 365 here",
              "92 tokens no merge makes"});
  // Without <|endoftext|>: 256 + 200 exactly.
  Vocab plain = v;
  plain.eot = false;
  write_both(dir, plain);
  EXPECT_EQ(BpeTokenizer::load(dir / "gpt2").vocab_size(), 456);
}

// Files saved with Windows line ends read as the same tokenizer (tiktoken accepts them too).
TEST(BpeTokenizer, CrlfLineEndsAreAccepted) {
  TempDir dir;
  const Vocab v = hand_vocab();
  write_both(dir, v);
  auto crlf = [](const std::string& text) {
    std::string out;
    for (char c : text) out += c == '\n' ? std::string("\r\n") : std::string(1, c);
    return out;
  };
  std::filesystem::create_directories(dir / "crlf");
  dir.write("crlf/encoder.json", encoder_json(v));
  dir.write("crlf/vocab.bpe", crlf(vocab_bpe(v)));
  dir.write("crlf.tiktoken", crlf(tiktoken_file(v)));
  const std::string text = "hello world, it's 12 \r\n  ok";
  const std::vector<int64_t> want = BpeTokenizer::load(dir / "gpt2").encode(text);
  for (const char* path : {"crlf", "crlf.tiktoken"}) {
    const BpeTokenizer tok = BpeTokenizer::load(dir / path);
    EXPECT_EQ(tok.vocab_size(), 269) << path;
    EXPECT_EQ(tok.encode(text), want) << path;
  }
}

TEST(BpeTokenizer, MalformedTiktokenFilesAreErrorsNamingFileAndLine) {
  TempDir dir;
  const std::string good = tiktoken_file(hand_vocab());
  const std::string path = dir / "v.tiktoken";
  auto with = [&](const std::string& text) {
    testing::write_bytes(path, text);
    return error_of([&] { BpeTokenizer::load(path); });
  };
  ASSERT_EQ(with(good), "");
  const std::string line = "v.tiktoken' line 269";  // the first line after the good ones
  expect_has(with(good + "aGVsbG8=\n"), {line, "expected tiktoken's 'base64(token) rank'"});
  expect_has(with(good + "aGVsbG8= 1 2\n"), {line, "expected"});
  expect_has(with(good + "\n"), {line, "expected"});
  expect_has(with(good + "aGVsb!8= 268\n"), {line, "'aGVsb!8=' is not the base64 of a token"});
  expect_has(with(good + "aGVsbG9= 268\n"), {line, "is not the base64"});  // non-zero padding bits
  expect_has(with(good + "aGVsbG8= x\n"), {line, "the rank 'x' is not an integer"});
  expect_has(with(good + "aGVsbG8= -1\n"), {line, "the rank '-1'"});
  expect_has(with(good + "aGVsbG8= 99999999999\n"), {line, "the rank '99999999999'"});
  expect_has(with(good + "aGVsbG8= 3\n"), {line, "the rank 3 repeats line 4"});
  expect_has(with(good + base64("hello") + " 268\n"), {line, "the token 'hello' repeats line 260"});
  // A rank past the last one leaves a gap below it: the gap is named, at the line it belongs on.
  expect_has(with(good + base64("zzz") + " 300\n"),
             {line, "the rank 268 is missing", "after the rank 267, holds the rank 300", "ranks up to 300"});
  expect_has(with(good.substr(good.find('\n') + 1)),
             {"v.tiktoken' line 1:", "the rank 0 is missing", "holds the rank 1"});
  std::string gap = good;
  const std::string rank_100 = base64(std::string(1, '\x64')) + " 100\n";
  gap.erase(gap.find(rank_100), rank_100.size());
  expect_has(with(gap), {"v.tiktoken' line 101:", "the rank 100 is missing", "after the rank 99, holds the rank 101",
                         "267 lines hold ranks up to 267"});
  std::string no_newline_byte = good;
  no_newline_byte.replace(no_newline_byte.find(base64("\n") + " 10\n"), base64("\n").size(), base64("\n\n"));
  expect_has(with(no_newline_byte), {"no token for the byte 0xa"});
  expect_has(with(""), {"the tokenizer file '" + path + "' is empty"});
  std::filesystem::create_directories(dir / "d.tiktoken");
  expect_has(error_of([&] { BpeTokenizer::load(dir / "d.tiktoken"); }), {"holds no encoder.json"});
}

// Whatever bytes the files hold, loading returns or throws zdl::Error: never another exception,
// never a crash.
TEST(BpeTokenizer, ArbitraryFileBytesNeverCrash) {
  TempDir dir;
  std::filesystem::create_directories(dir / "gpt2");
  const Vocab v = hand_vocab();
  const std::string files[] = {encoder_json(v), vocab_bpe(v), tiktoken_file(v)};
  uint64_t s = 1;
  auto draw = [&](uint64_t n) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return (s >> 33) % n;
  };
  for (int round = 0; round < 300; ++round) {
    std::string f = files[round % 3];
    for (int k = 0, edits = 1 + static_cast<int>(draw(4)); k < edits; ++k)  // damage a few bytes
      f[draw(f.size())] = static_cast<char>(draw(256));
    const bool gpt2 = round % 3 != 2;
    dir.write("gpt2/encoder.json", round % 3 == 0 ? f : files[0]);
    dir.write("gpt2/vocab.bpe", round % 3 == 1 ? f : files[1]);
    dir.write("v.tiktoken", f);
    try {
      const BpeTokenizer tok = BpeTokenizer::load(gpt2 ? dir / "gpt2" : dir / "v.tiktoken");
      EXPECT_EQ(tok.decode(tok.encode("hello world, it's 123")), "hello world, it's 123");
    } catch (const Error&) {
    }
  }
}

}  // namespace zdl::data

// The default corpus generator; see default_corpus.h for what it teaches and why.
//
// Draws use Philox under a fixed key with a plain counter, and integer modulo (never
// std::*_distribution, whose output differs between standard libraries), so the text is the
// same everywhere. Changing anything here changes the corpus and its fingerprint: old
// checkpoints trained on it will then refuse to resume on the new file, as they should.
#include "data/default_corpus.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>

#include "core/check.h"
#include "core/rng.h"

namespace zdl::data {

namespace {

constexpr uint64_t kCorpusSeed = 0x5A45524F444C3031ull;  // "ZERODL01"

class Draw {
 public:
  // Uniform-ish integer in [0, n).
  int below(int n) { return static_cast<int>(Philox::block(kCorpusSeed, 0, counter_++)[0] % static_cast<uint32_t>(n)); }
  int between(int lo, int hi) { return lo + below(hi - lo + 1); }  // inclusive
  bool chance(int percent) { return below(100) < percent; }
  template <class A>
  const auto& pick(const A& a) {
    return a[static_cast<size_t>(below(static_cast<int>(a.size())))];
  }

 private:
  uint64_t counter_ = 0;
};

struct Noun {
  std::string_view one, many;
};
struct Verb {
  std::string_view one, many;  // "runs" (he/she/it), "run" (they)
};

constexpr std::array<std::string_view, 26> kNames = {
    "ada", "ben", "cleo", "dan", "eve", "finn", "gus", "hana", "ivy", "jon", "kai", "lena", "mo",
    "nora", "omar", "pia", "quinn", "rosa", "sam", "tess", "uma", "vic", "wren", "xan", "yara", "zoe"};
constexpr std::array<std::string_view, 18> kAdjectives = {
    "small", "big", "red", "old", "young", "quiet", "happy", "tired",
    "brave", "green", "little", "gray", "clever", "slow", "quick", "sleepy", "angry", "orange"};
constexpr std::array<Noun, 14> kNouns = {{{"cat", "cats"},
                                          {"dog", "dogs"},
                                          {"fox", "foxes"},
                                          {"bird", "birds"},
                                          {"horse", "horses"},
                                          {"child", "children"},
                                          {"mouse", "mice"},
                                          {"wolf", "wolves"},
                                          {"farmer", "farmers"},
                                          {"teacher", "teachers"},
                                          {"duck", "ducks"},
                                          {"bee", "bees"},
                                          {"girl", "girls"},
                                          {"boy", "boys"}}};
constexpr std::array<Verb, 11> kIntransitive = {{{"runs", "run"},
                                                 {"sleeps", "sleep"},
                                                 {"sings", "sing"},
                                                 {"jumps", "jump"},
                                                 {"waits", "wait"},
                                                 {"walks", "walk"},
                                                 {"rests", "rest"},
                                                 {"plays", "play"},
                                                 {"hides", "hide"},
                                                 {"flies", "fly"},
                                                 {"watches", "watch"}}};
constexpr std::array<Verb, 7> kTransitive = {{{"sees", "see"},
                                              {"likes", "like"},
                                              {"follows", "follow"},
                                              {"chases", "chase"},
                                              {"finds", "find"},
                                              {"helps", "help"},
                                              {"has", "have"}}};
constexpr std::array<std::string_view, 9> kPlaces = {
    "in the garden", "by the river", "under the old tree", "near the house", "on the hill",
    "at the market", "in the snow",  "behind the barn",    "across the field"};
constexpr std::array<std::string_view, 6> kTimes = {"every morning", "at night", "today",
                                                    "after lunch",   "in spring", "before dinner"};
constexpr std::array<Noun, 6> kItems = {
    {{"apple", "apples"}, {"book", "books"}, {"coin", "coins"}, {"shell", "shells"}, {"stone", "stones"}, {"pear", "pears"}}};
constexpr std::array<std::string_view, 21> kNumberWords = {
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"};
constexpr std::array<std::string_view, 7> kDays = {"monday", "tuesday", "wednesday", "thursday",
                                                   "friday", "saturday", "sunday"};
constexpr std::array<std::string_view, 12> kMonths = {"january", "february", "march",     "april",   "may",      "june",
                                                      "july",    "august",   "september", "october", "november", "december"};

class Writer {
 public:
  explicit Writer(std::string& out) : out_(out) {}
  Writer& operator<<(std::string_view s) {
    out_ += s;
    return *this;
  }
  Writer& operator<<(char c) {
    out_ += c;
    return *this;
  }
  Writer& operator<<(int v) {
    out_ += std::to_string(v);
    return *this;
  }

 private:
  std::string& out_;
};

// "the red fox" / "the red foxes" / "an old fox" (a/an agrees with the next word).
void noun_phrase(Draw& d, Writer& w, bool plural) {
  const Noun& n = d.pick(kNouns);
  const bool definite = plural || d.chance(60);
  std::string_view adjective = d.chance(60) ? d.pick(kAdjectives) : std::string_view();
  const std::string_view next = adjective.empty() ? (plural ? n.many : n.one) : adjective;
  const bool vowel = std::string_view("aeiou").find(next.front()) != std::string_view::npos;
  w << (definite ? "the " : vowel ? "an " : "a ");
  if (!adjective.empty()) w << adjective << ' ';
  w << (plural ? n.many : n.one);
}

// Subject-verb agreement: the verb form depends on a noun a few words back.
void agreement_sentence(Draw& d, Writer& w) {
  const bool plural = d.chance(50);
  switch (d.below(4)) {
    case 0: {
      noun_phrase(d, w, plural);
      const Verb& v = d.pick(kIntransitive);
      w << ' ' << (plural ? v.many : v.one);
      if (d.chance(70)) w << ' ' << d.pick(kPlaces);
      if (d.chance(40)) w << ' ' << d.pick(kTimes);
      break;
    }
    case 1: {
      noun_phrase(d, w, plural);
      const Verb& v = d.pick(kTransitive);
      w << ' ' << (plural ? v.many : v.one) << ' ';
      noun_phrase(d, w, d.chance(50));
      if (d.chance(40)) w << ' ' << d.pick(kPlaces);
      break;
    }
    case 2: {
      noun_phrase(d, w, plural);
      w << (plural ? " are " : " is ") << d.pick(kAdjectives);
      if (d.chance(50)) w << ' ' << d.pick(kTimes);
      break;
    }
    default: {
      const int count = plural ? d.between(2, 12) : 1;
      const Noun& n = d.pick(kNouns);
      w << (plural ? "there are " : "there is ") << kNumberWords[static_cast<size_t>(count)] << ' '
        << (plural ? n.many : n.one) << ' ' << d.pick(kPlaces);
      break;
    }
  }
  w << ".\n";
}

void arithmetic_line(Draw& d, Writer& w) {
  switch (d.below(3)) {
    case 0: {
      const int a = d.between(0, 20), b = d.between(0, 20);
      w << a << " + " << b << " = " << (a + b);
      break;
    }
    case 1: {
      const int a = d.between(0, 20), b = d.between(0, a);
      w << a << " - " << b << " = " << (a - b);
      break;
    }
    default: {
      const int a = d.between(1, 9), b = d.between(1, 9);
      w << a << " * " << b << " = " << (a * b);
      break;
    }
  }
  w << '\n';
}

void question_answer(Draw& d, Writer& w) {
  const int a = d.between(1, 12), b = d.between(1, 12);
  if (d.chance(50)) {
    w << "q: what is " << a << " plus " << b << "? a: " << (a + b) << ".\n";
  } else {
    const int n = d.between(1, 20);
    w << "q: what comes after " << kNumberWords[static_cast<size_t>(n - 1)] << "? a: "
      << kNumberWords[static_cast<size_t>(n)] << ".\n";
  }
}

void item_count(Writer& w, int k, const Noun& item) { w << k << ' ' << (k == 1 ? item.one : item.many); }

// A story that carries state across sentences: the last line follows from the first two.
void story(Draw& d, Writer& w) {
  const auto& a = d.pick(kNames);
  std::string_view b = d.pick(kNames);
  while (b == a) b = d.pick(kNames);
  const Noun& item = d.pick(kItems);
  const int have = d.between(2, 9), give = d.between(1, have - 1), other = d.between(0, 5);
  w << a << " has ";
  item_count(w, have, item);
  w << " and " << b << " has ";
  item_count(w, other, item);
  w << ".\n" << a << " gives ";
  item_count(w, give, item);
  w << " to " << b << ".\nnow " << a << " has ";
  item_count(w, have - give, item);
  w << " and " << b << " has ";
  item_count(w, other + give, item);
  w << ".\n";
}

void counting(Draw& d, Writer& w) {
  switch (d.below(4)) {
    case 0: {
      const int from = d.between(0, 40), len = d.between(5, 10);
      w << "count from " << from << ':';
      for (int i = 0; i < len; ++i) w << ' ' << (from + i);
      break;
    }
    case 1: {
      const int step = d.between(2, 5), from = step * d.between(0, 6), len = d.between(4, 8);
      w << "count by " << step << ':';
      for (int i = 0; i < len; ++i) w << ' ' << (from + step * i);
      break;
    }
    case 2: {
      const int from = d.between(0, 12), len = d.between(4, 8);
      w << "count in words:";
      for (int i = 0; i < len && from + i <= 20; ++i) w << ' ' << kNumberWords[static_cast<size_t>(from + i)];
      break;
    }
    default: {
      const bool days = d.chance(50);
      const int n = days ? 7 : 12, from = d.below(n), len = d.between(3, n);
      w << (days ? "the days:" : "the months:");
      for (int i = 0; i < len; ++i) {
        const size_t k = static_cast<size_t>((from + i) % n);
        w << ' ' << (days ? kDays[k] : kMonths[k]);
      }
      break;
    }
  }
  w << ".\n";
}

void pattern(Draw& d, Writer& w) {
  std::string unit;
  const int len = d.between(2, 4);
  for (int i = 0; i < len; ++i) unit += static_cast<char>('a' + d.below(26));
  const int reps = d.between(3, 6);
  w << "pattern:";
  for (int i = 0; i < reps; ++i) w << ' ' << unit;
  w << ".\n";
}

}  // namespace

std::string default_corpus() {
  std::string out;
  out.reserve(static_cast<size_t>(kDefaultCorpusMinBytes) + 4096);
  Writer w(out);
  Draw d;
  // Paragraphs of one kind each, separated by a blank line.
  while (static_cast<int64_t>(out.size()) < kDefaultCorpusMinBytes) {
    const int kind = d.below(100);
    if (kind < 35) {
      for (int i = d.between(3, 6); i > 0; --i) agreement_sentence(d, w);
    } else if (kind < 55) {
      for (int i = d.between(3, 6); i > 0; --i) arithmetic_line(d, w);
    } else if (kind < 70) {
      story(d, w);
    } else if (kind < 82) {
      for (int i = d.between(1, 3); i > 0; --i) counting(d, w);
    } else if (kind < 90) {
      for (int i = d.between(2, 4); i > 0; --i) question_answer(d, w);
    } else {
      for (int i = d.between(1, 3); i > 0; --i) pattern(d, w);
    }
    w << '\n';
  }
  return out;
}

void write_default_corpus(const std::string& path) {
  const std::string text = default_corpus();
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ZDL_CHECK(fd >= 0, "write_default_corpus: cannot create '", tmp, "': ", std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      ZDL_CHECK(false, "write_default_corpus: cannot write '", tmp, "': ", std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    ZDL_CHECK(false, "write_default_corpus: cannot close '", tmp, "': ", std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    ZDL_CHECK(false, "write_default_corpus: cannot rename '", tmp, "' to '", path, "': ", std::strerror(err));
  }
}

std::string default_corpus_file() {
  const auto path = std::filesystem::temp_directory_path() / "zerodl-default-corpus.txt";
  // Compared byte for byte, not by size: a file of the same size with other bytes (a corrupted
  // copy, someone else's file of that name) would be trained on as the corpus.
  const std::string corpus = default_corpus();
  std::ifstream in(path, std::ios::binary);
  std::string there(corpus.size() + 1, '\0');
  in.read(there.data(), static_cast<std::streamsize>(there.size()));
  there.resize(static_cast<size_t>(in.gcount()));
  if (there != corpus) write_default_corpus(path.string());
  return path.string();
}

}  // namespace zdl::data

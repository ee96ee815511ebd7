// TokenFiles and llm.c shards: tokens come back as written, a pattern's shards are one stream
// in name order (TokenDataset's windows cross them, and resume replays them exactly), text stays
// bytes, and every malformed input is an error naming the file and the numbers.
#include "data/token_files.h"

#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <numeric>

#include "data/llmc_shard.h"
#include "data/token_dataset.h"
#include "error_of.h"
#include "temp_dir.h"

namespace zdl::data {

namespace {

using ::zdl::testing::error_of;
using ::zdl::testing::TempDir;

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

// An llm.c shard as llm.c writes it: 256 little-endian int32 (magic, version, token count, then
// zeros) and the tokens, `token_bytes` each. The header's fields can be set to wrong values.
std::string llmc_shard(const std::vector<int64_t>& tokens, int32_t magic = kLlmcMagic, int32_t version = kLlmcVersion,
                       int64_t declared = -1, int token_bytes = 2) {
  std::string out;
  put_le(out, static_cast<uint32_t>(magic), 4);
  put_le(out, static_cast<uint32_t>(version), 4);
  put_le(out, static_cast<uint32_t>(declared >= 0 ? declared : static_cast<int64_t>(tokens.size())), 4);
  out.resize(kLlmcHeaderBytes, '\0');
  for (int64_t t : tokens) put_le(out, static_cast<uint64_t>(t), token_bytes);
  return out;
}

// n GPT-2-like ids that identify their position: an end-of-text first, as llm.c's shards begin.
std::vector<int64_t> ids(int64_t n, int64_t base) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i == 0 ? 50256 : (base + i * 7) % 50256;
  return v;
}

std::vector<int64_t> read_all(const TokenFiles& files) {
  std::vector<int64_t> out(static_cast<size_t>(files.num_tokens()));
  files.read(0, files.num_tokens(), out.data());
  return out;
}

std::vector<int64_t> concat(std::initializer_list<std::vector<int64_t>> parts) {
  std::vector<int64_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

void expect_has(const std::string& msg, std::initializer_list<std::string> needles) {
  for (const std::string& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "no '" << n << "' in: " << msg;
}

}  // namespace

TEST(LlmcData, TokensComeBackAsWritten) {
  TempDir dir;
  const std::vector<int64_t> tokens{50256, 0, 1, 255, 256, 1000, 50255, 65535};
  const std::string path = dir.write("one.bin", llmc_shard(tokens));
  TokenFiles files(path);
  EXPECT_EQ(files.format(), TokenFormat::Llmc);
  EXPECT_STREQ(format_name(files.format()), "llm.c");
  ASSERT_EQ(files.files().size(), 1u);
  EXPECT_EQ(files.num_tokens(), 8);
  EXPECT_EQ(read_all(files), tokens);
  std::vector<int64_t> mid(3);
  files.read(3, 3, mid.data());
  EXPECT_EQ(mid, (std::vector<int64_t>{255, 256, 1000}));
  EXPECT_NE(error_of([&] { files.read(6, 3, mid.data()); }).find("outside the stream of 8"), std::string::npos);
}

// What prepare_tokens writes: llmc_shard_header(n), then n little-endian uint16, is the format read.
TEST(LlmcData, AShardWrittenWithItsHeaderReadsBack) {
  TempDir dir;
  const std::vector<int64_t> tokens{50256, 0, 1, 255, 256, 65535};
  std::string bytes = llmc_shard_header(static_cast<int64_t>(tokens.size()));
  EXPECT_EQ(bytes, llmc_shard(tokens).substr(0, kLlmcHeaderBytes));
  for (int64_t t : tokens) put_le(bytes, static_cast<uint64_t>(t), 2);
  TokenFiles files(dir.write("w.bin", bytes));
  EXPECT_EQ(files.format(), TokenFormat::Llmc);
  EXPECT_EQ(read_all(files), tokens);
  EXPECT_NE(error_of([] { llmc_shard_header(-1); }).find("not -1"), std::string::npos);
  EXPECT_NE(error_of([] { llmc_shard_header(int64_t{1} << 31); }).find("2^31 - 1"), std::string::npos);
}

TEST(LlmcData, APatternsShardsAreOneStreamInNameOrder) {
  TempDir dir;
  const auto a = ids(40, 1), b = ids(3, 2), c = ids(25, 3);
  // Written out of order; read in byte order of their names. An empty shard adds nothing.
  dir.write("tiny_train_000002.bin", llmc_shard(c));
  dir.write("tiny_train_000000.bin", llmc_shard(a));
  dir.write("tiny_train_000001.bin", llmc_shard(b));
  dir.write("tiny_train_000001a.bin", llmc_shard({}));
  dir.write("tiny_val_000000.bin", llmc_shard(ids(30, 4)));  // not matched
  TokenFiles files(dir / "tiny_train_*.bin");
  ASSERT_EQ(files.files().size(), 4u);
  EXPECT_EQ(files.files()[0].mapped.path(), dir / "tiny_train_000000.bin");
  EXPECT_EQ(files.files()[3].mapped.path(), dir / "tiny_train_000002.bin");
  EXPECT_EQ(files.files()[2].first, 43);
  EXPECT_EQ(files.files()[3].first, 43);
  EXPECT_EQ(files.num_tokens(), 68);
  const auto stream = concat({a, b, c});
  EXPECT_EQ(read_all(files), stream);
  // Every range, across any number of boundaries, is that range of the concatenation.
  for (int64_t begin = 0; begin < 68; ++begin)
    for (int64_t n = 0; begin + n <= 68; n += 5) {
      std::vector<int64_t> got(static_cast<size_t>(n));
      files.read(begin, n, got.data());
      ASSERT_EQ(got, std::vector<int64_t>(stream.begin() + begin, stream.begin() + begin + n)) << begin << "+" << n;
    }
}

// Windows cross shard boundaries: the batches are those of the concatenated stream, a pure
// function of (seed, index) however the tokens are split into shards.
TEST(LlmcData, DatasetWindowsAreThoseOfTheConcatenatedStream) {
  TempDir dir;
  const auto a = ids(300, 1), b = ids(50, 2), c = ids(400, 3);
  dir.write("s_0.bin", llmc_shard(a));
  dir.write("s_1.bin", llmc_shard(b));
  dir.write("s_2.bin", llmc_shard(c));
  dir.write("whole.bin", llmc_shard(concat({a, b, c})));
  const TokenDatasetOptions opts{.batch_size = 4, .seq_len = 32, .val_fraction = 0.2, .seed = 3, .vocab_size = 50257};
  TokenDataset sharded(dir / "s_*.bin", opts), whole(dir / "whole.bin", opts);
  const auto stream = concat({a, b, c});
  EXPECT_EQ(sharded.num_tokens(), 750);
  EXPECT_EQ(sharded.split_size(Split::Val), 150);
  int crossing = 0;
  for (int64_t i = 0; i < 30; ++i) {
    const auto starts = sharded.window_starts(Split::Train, i);
    const Batch x = sharded.random_batch(Split::Train, i), y = whole.random_batch(Split::Train, i);
    EXPECT_EQ(x.inputs.to_int_vector(), y.inputs.to_int_vector()) << i;
    EXPECT_EQ(x.targets.to_int_vector(), y.targets.to_int_vector()) << i;
    const auto in = x.inputs.to_int_vector(), out = x.targets.to_int_vector();
    for (int64_t r = 0; r < 4; ++r) {
      const int64_t s = starts[static_cast<size_t>(r)];
      crossing += (s < 300 && s + 33 > 300) || (s < 350 && s + 33 > 350);
      for (int64_t t = 0; t < 32; ++t) {
        ASSERT_EQ(in[r * 32 + t], stream[s + t]);
        ASSERT_EQ(out[r * 32 + t], stream[s + t + 1]);
      }
    }
  }
  EXPECT_GT(crossing, 0) << "no window crossed a shard boundary: the test proves less than it says";
  EXPECT_EQ(sharded.eval_batch(Split::Val, 0).inputs.to_int_vector(),
            whole.eval_batch(Split::Val, 0).inputs.to_int_vector());
}

TEST(LlmcData, RestoredPositionReproducesTheFollowingBatches) {
  TempDir dir;
  for (int k = 0; k < 3; ++k) dir.write("r_" + std::to_string(k) + ".bin", llmc_shard(ids(200 + 50 * k, k)));
  const TokenDatasetOptions opts{.batch_size = 4, .seq_len = 16, .seed = 99};
  TokenDataset run(dir / "r_*.bin", opts);
  for (int i = 0; i < 5; ++i) run.next_batch();
  const int64_t saved = run.position();
  std::vector<std::vector<int64_t>> expected;
  for (int i = 0; i < 4; ++i) expected.push_back(run.next_batch().targets.to_int_vector());
  TokenDataset resumed(dir / "r_*.bin", opts);  // a fresh process
  resumed.set_position(saved);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(resumed.next_batch().targets.to_int_vector(), expected[i]) << i;
  EXPECT_EQ(resumed.step_rows(saved, 0, 4).targets.to_int_vector(), expected[0]);
  EXPECT_EQ(resumed.fingerprint(), run.fingerprint());
}

TEST(LlmcData, TextStaysBytes) {
  TempDir dir;
  const std::string text = "the cat sat on the mat\n";
  // Not .bin, .bin without the magic, and the magic in a file not named .bin: all bytes.
  const std::string with_magic = llmc_shard({1, 2, 3});
  for (const auto& [name, bytes] : std::vector<std::pair<std::string, std::string>>{
           {"a.txt", text}, {"b.bin", text}, {"c.dat", with_magic}, {"d.bin", "abc"}}) {
    TokenFiles files(dir.write(name, bytes));
    EXPECT_EQ(files.format(), TokenFormat::Bytes) << name;
    std::vector<int64_t> want;
    for (unsigned char byte : bytes) want.push_back(byte);
    EXPECT_EQ(read_all(files), want) << name;
  }
  // A name holding glob characters is read as itself while it exists.
  const std::string odd = dir.write("data[1].txt", text);
  dir.write("data1.txt", "other");
  EXPECT_FALSE(is_glob_pattern(odd));
  EXPECT_EQ(read_all(TokenFiles(odd)).size(), text.size());
  EXPECT_TRUE(is_glob_pattern(dir / "data*.txt"));
  // Several text files are one stream of bytes too.
  EXPECT_EQ(TokenFiles(dir / "[ab].*").num_tokens(), static_cast<int64_t>(2 * text.size()));
}

TEST(LlmcData, WrongMagicIsRefusedNamingBothMagics) {
  TempDir dir;
  // llm.c's Llama 3 shards: magic 20240801, version 7, uint32 tokens.
  const std::string llama = dir.write("llama.bin", llmc_shard(ids(10, 1), 20240801, 7, -1, 4));
  expect_has(error_of([&] { TokenFiles f(llama); }),
             {llama, "wrong magic", "20240801", "20240520", "10 tokens of 4 bytes"});
  const std::string other = dir.write("other.bin", llmc_shard(ids(10, 1), 12345));
  expect_has(error_of([&] { TokenFiles f(other); }), {other, "wrong magic", "12345"});
}

TEST(LlmcData, UnsupportedVersionIsRefused) {
  TempDir dir;
  const std::string path = dir.write("v2.bin", llmc_shard(ids(10, 1), kLlmcMagic, 2));
  expect_has(error_of([&] { TokenFiles f(path); }), {path, "version 2", "only version 1"});
}

TEST(LlmcData, TruncatedOrLongerThanItsHeaderIsRefused) {
  TempDir dir;
  const std::string shard = llmc_shard(ids(100, 1));
  const std::string cut = dir.write("cut.bin", shard.substr(0, shard.size() - 80));
  expect_has(error_of([&] { TokenFiles f(cut); }),
             {cut, "truncated", "header says 100 tokens (1224 bytes", "the file has 1144 bytes (60 tokens)"});
  const std::string head = dir.write("head.bin", shard.substr(0, 500));
  expect_has(error_of([&] { TokenFiles f(head); }), {head, "truncated", "header alone takes 1024 bytes", "has 500"});
  const std::string longer = dir.write("longer.bin", shard + "xy");
  expect_has(error_of([&] { TokenFiles f(longer); }), {longer, "longer than its header says", "1226 bytes, 2 more"});
  const std::string negative = dir.write("negative.bin", llmc_shard(ids(10, 1), kLlmcMagic, kLlmcVersion, 0xFFFFFFFF));
  expect_has(error_of([&] { TokenFiles f(negative); }), {negative, "negative token count, -1"});
  // One bad shard of a pattern fails it, naming that shard.
  dir.write("p_0.bin", shard);
  const std::string bad = dir.write("p_1.bin", shard.substr(0, shard.size() - 1));
  expect_has(error_of([&] { TokenFiles f(dir / "p_*.bin"); }), {bad, "truncated"});
}

TEST(LlmcData, AnIdOutsideTheVocabularyNamesFilePositionAndId) {
  TempDir dir;
  auto tokens = ids(50, 1);
  for (auto& t : tokens) t %= 900;
  dir.write("v_0.bin", llmc_shard(tokens));
  tokens[17] = 50256;
  tokens[30] = 1200;
  const std::string second = dir.write("v_1.bin", llmc_shard(tokens));
  TokenDatasetOptions opts{.batch_size = 2, .seq_len = 8, .val_fraction = 0.0, .vocab_size = 50257};
  EXPECT_NO_THROW(TokenDataset(dir / "v_*.bin", opts));
  opts.vocab_size = 1000;
  const std::string msg = error_of([&] { TokenDataset ds(dir / "v_*.bin", opts); });
  expect_has(msg, {second, "token id 50256 at token 17 (byte 1058 of the file)", "vocabulary of 1000 ids",
                   "largest id is 50256", "at least 50257"});
  // Unchecked without a vocabulary (0), and bytes fit any vocabulary of 256 or more.
  opts.vocab_size = 0;
  EXPECT_NO_THROW(TokenDataset(dir / "v_*.bin", opts));
  TokenFiles text(dir.write("t.txt", std::string(100, '\xff')));
  EXPECT_NO_THROW(text.check_ids_below(256));
  expect_has(error_of([&] { text.check_ids_below(200); }), {"t.txt", "token id 255 at token 0"});
}

TEST(LlmcData, APatternThatMatchesNothingOrMixesFormatsIsRefused) {
  TempDir dir;
  expect_has(error_of([&] { TokenFiles f(dir / "none_*.bin"); }), {"no file matches the pattern", dir / "none_*.bin"});
  const std::string shard = dir.write("m_0.bin", llmc_shard(ids(10, 1)));
  const std::string text_bin = dir.write("m_1.bin", "plain text, not a shard\n");
  expect_has(error_of([&] { TokenFiles f(dir / "m_*.bin"); }),
             {"mix formats", shard, "is an llm.c token shard", text_bin, "does not start with llm.c's magic 20240520"});
  dir.write("n_0.bin", llmc_shard(ids(10, 1)));
  const std::string text = dir.write("n_1.txt", "plain text\n");
  expect_has(error_of([&] { TokenFiles f(dir / "n_*"); }), {"mix formats", text, "does not end in .bin"});
  // The text first, then the shard: the same complaint.
  dir.write("o_0.txt", "plain text\n");
  dir.write("o_1.bin", llmc_shard(ids(10, 1)));
  expect_has(error_of([&] { TokenFiles f(dir / "o_*"); }), {"mix formats", "o_1.bin", "o_0.txt"});
}

TEST(LlmcData, FingerprintCoversEveryShardsSizeAndContents) {
  TempDir dir;
  dir.write("f_0.bin", llmc_shard(ids(100, 1)));
  dir.write("f_1.bin", llmc_shard(ids(100, 2)));
  TokenFiles files(dir / "f_*.bin");
  const auto fps = files.file_fingerprints();
  ASSERT_EQ(fps.size(), 2u);
  EXPECT_EQ(fps[0].size, 1224);
  const DataFingerprint all = combine(fps);
  EXPECT_EQ(all.size, 2448);
  EXPECT_EQ(combine({fps[0]}), fps[0]);  // one file's is its own (single-file checkpoints still match)
  EXPECT_NE(all, combine({fps[1], fps[0]}));  // order counts
  EXPECT_NE(all, combine({fps[0], fps[0]}));
  EXPECT_THROW(combine({}), Error);
  // One token changed in the second shard: its fingerprint and the whole's change, the first's not.
  auto changed = ids(100, 2);
  changed[50] += 1;
  dir.write("f_1.bin", llmc_shard(changed));
  const auto now = TokenFiles(dir / "f_*.bin").file_fingerprints();
  EXPECT_EQ(now[0], fps[0]);
  EXPECT_NE(now[1], fps[1]);
  EXPECT_NE(combine(now), all);
  // A shard changed under a running dataset is an error naming it.
  const std::string msg = error_of([&] { files.check_unchanged(); });
  if (!msg.empty()) expect_has(msg, {dir / "f_1.bin", "changed during the run"});
  std::filesystem::resize_file(dir / "f_0.bin", 1100);
  expect_has(error_of([&] { files.check_unchanged(); }), {dir / "f_0.bin", "changed during the run"});
}

// The process's soft limit on open files lowered to `soft` for one scope (the hard limit stays,
// so it comes back).
class OpenFileLimit {
 public:
  explicit OpenFileLimit(rlim_t soft) {
    ::getrlimit(RLIMIT_NOFILE, &saved_);
    struct rlimit lowered = saved_;
    lowered.rlim_cur = soft;
    EXPECT_EQ(::setrlimit(RLIMIT_NOFILE, &lowered), 0);
  }
  ~OpenFileLimit() { ::setrlimit(RLIMIT_NOFILE, &saved_); }

 private:
  struct rlimit saved_ {};
};

// The lowest free descriptor: the files this process holds open now, about.
int open_files() {
  const int fd = ::dup(0);
  ::close(fd);
  return fd;
}

// A dataset holds no descriptor per file: more shards than `ulimit -n` allows open at once load
// and read. Where opening does hit the limit, the error says which limit and how to raise it.
TEST(LlmcData, MoreShardsThanTheOpenFileLimitLoad) {
  TempDir dir;
  constexpr int kShards = 300;
  std::vector<int64_t> stream;
  for (int k = 0; k < kShards; ++k) {
    char name[32];
    std::snprintf(name, sizeof name, "many_%04d.bin", k);
    const auto t = ids(3, k);
    dir.write(name, llmc_shard(t));
    stream.insert(stream.end(), t.begin(), t.end());
  }
  {
    const OpenFileLimit limit(static_cast<rlim_t>(open_files() + 64));
    TokenFiles files(dir / "many_*.bin");
    EXPECT_EQ(files.files().size(), static_cast<size_t>(kShards));
    EXPECT_EQ(read_all(files), stream);
    EXPECT_NO_THROW(files.check_unchanged());
    EXPECT_EQ(files.file_fingerprints().size(), static_cast<size_t>(kShards));
  }
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
  // Sanitized builds stop here: with no descriptor left, UBSan's vptr check cannot make the pipe
  // it probes memory with, and reports the error message's ostream as a bad object.
  return;
#endif
#endif
  const OpenFileLimit none_left(static_cast<rlim_t>(open_files()));
  expect_has(error_of([&] { TokenFiles f(dir / "many_0000.bin"); }),
             {"many_0000.bin", "RLIMIT_NOFILE", "ulimit -n"});
}

TEST(DataFingerprint, ParseIsTheInverseOfToString) {
  const DataFingerprint fp{1234, 0x0123456789abcdefull};
  EXPECT_EQ(fp.to_string(), "size=1234 fnv1a=0x0123456789abcdef");
  EXPECT_EQ(DataFingerprint::parse(fp.to_string()), fp);
  for (const char* bad : {"", "size=12", "size=-1 fnv1a=0x0123456789abcdef", "size=1 fnv1a=0x0123456789abcdef tail"})
    EXPECT_NE(error_of([&] { DataFingerprint::parse(bad); }).find("not a data fingerprint"), std::string::npos) << bad;
}

}  // namespace zdl::data

// Shard set manifests: a set prepare_tokens wrote reads only whole (every listed shard that the
// pattern matches, none more, each of its size and checksum), a set whose manifest is missing
// (an interrupted prepare_tokens) is refused, and llm.c's own shards, which have none, still load.
#include "data/shard_manifest.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "core/hash.h"
#include "data/llmc_shard.h"
#include "data/token_files.h"
#include "error_of.h"
#include "temp_dir.h"

namespace zdl::data {

namespace {

using ::zdl::testing::error_of;
using ::zdl::testing::TempDir;

void expect_has(const std::string& msg, std::initializer_list<std::string> needles) {
  EXPECT_FALSE(msg.empty()) << "no error";
  for (const std::string& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "no '" << n << "' in: " << msg;
}

// A shard of n tokens (ids k, k+1, ...) with prepare_tokens' header, or llm.c's.
std::string shard(int64_t n, int k, bool tagged = true) {
  std::string bytes = tagged ? manifest_shard_header(n) : llmc_shard_header(n);
  for (int64_t i = 0; i < n; ++i) bytes += {static_cast<char>(k + i), '\0'};
  return bytes;
}

// What prepare_tokens leaves under dir/PREFIX: a validation shard and `train` training shards of
// 10 + k tokens, then the manifest listing them (unless `manifest` is false: an interrupted run).
std::vector<ManifestShard> write_set(const TempDir& dir, const std::string& prefix, int train, bool manifest = true) {
  std::vector<ManifestShard> listed;
  for (int k = 0; k <= train; ++k) {
    char name[64];
    std::snprintf(name, sizeof name, "%s_%s_%06d.bin", prefix.c_str(), k == 0 ? "val" : "train", k);
    const std::string bytes = shard(10 + k, k);
    dir.write(name, bytes);
    listed.push_back({name, static_cast<int64_t>(bytes.size()), fnv1a64(bytes.data(), bytes.size())});
  }
  if (manifest) dir.write(prefix + "_manifest.json", shard_manifest_json(listed));
  return listed;
}

}  // namespace

TEST(ShardManifest, NamesAndHeaders) {
  EXPECT_EQ(shard_manifest_path("shards/tiny"), "shards/tiny_manifest.json");
  EXPECT_EQ(shard_prefix("shards/tiny_train_000001.bin"), "shards/tiny");
  EXPECT_EQ(shard_prefix("tiny_val_000000.bin"), "tiny");
  EXPECT_EQ(shard_prefix("a_b_train_1234567.bin"), "a_b");
  for (const char* other : {"tiny_train_.bin", "tiny_train_0001.txt", "shards/_train_000001.bin", "tiny_000001.bin",
                            "tiny_test_000001.bin", "tiny_train_00a1.bin"})
    EXPECT_EQ(shard_prefix(other), std::nullopt) << other;
  // The tag sits in a header entry llm.c leaves zero: the shard reads the same either way.
  TempDir dir;
  const MappedFile tagged(dir.write("t.bin", shard(5, 1))), plain(dir.write("p.bin", shard(5, 1, false)));
  EXPECT_TRUE(has_manifest_tag(tagged));
  EXPECT_FALSE(has_manifest_tag(plain));
  EXPECT_EQ(llmc_shard_tokens(tagged).count, 5);
  EXPECT_EQ(std::string(tagged.data() + kLlmcHeaderBytes, tagged.data() + tagged.size()),
            std::string(plain.data() + kLlmcHeaderBytes, plain.data() + plain.size()));
}

TEST(ShardManifest, AWholeSetLoadsAndItsChecksumsAreTheFingerprints) {
  TempDir dir;
  const std::vector<ManifestShard> listed = write_set(dir, "p", 3);
  EXPECT_EQ(read_shard_manifest(dir / "p_manifest.json"), listed);
  TokenFiles train(dir / "p_train_*.bin");
  ASSERT_EQ(train.files().size(), 3u);
  EXPECT_EQ(train.num_tokens(), 11 + 12 + 13);
  const std::vector<DataFingerprint> fps = train.file_fingerprints();
  ASSERT_EQ(fps.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(fps[i], (DataFingerprint{listed[i + 1].bytes, listed[i + 1].fnv1a})) << i;
  EXPECT_EQ(TokenFiles(dir / "p_*.bin").files().size(), 4u);
  EXPECT_EQ(TokenFiles(dir / "p_train_000002.bin").num_tokens(), 12);
}

// A run killed while renaming leaves some shards and no manifest: refused, the shard and the
// missing manifest named. llm.c's shards (no tag) under the same names need no manifest.
TEST(ShardManifest, AnInterruptedSetWithoutItsManifestIsRefused) {
  TempDir dir;
  write_set(dir, "p", 5, false);
  expect_has(error_of([&] { TokenFiles f(dir / "p_train_*.bin"); }),
             {dir / "p_train_000001.bin", "written by prepare_tokens", dir / "p_manifest.json", "is missing",
              "interrupted", "p_*.bin"});
  for (int k = 1; k <= 3; ++k) dir.write("l_train_00000" + std::to_string(k) + ".bin", shard(10, k, false));
  EXPECT_EQ(TokenFiles(dir / "l_train_*.bin").files().size(), 3u);
}

TEST(ShardManifest, ASetThatIsNotTheManifestsIsRefused) {
  TempDir dir;
  const std::vector<ManifestShard> listed = write_set(dir, "p", 4);
  const std::string pattern = dir / "p_train_*.bin";
  // A shard missing.
  std::filesystem::rename(dir / "p_train_000003.bin", dir / "away.bin");
  expect_has(error_of([&] { TokenFiles f(pattern); }),
             {dir / "p_train_000003.bin' is missing", dir / "p_manifest.json", "lists 4 shards that", "3 of them"});
  std::filesystem::rename(dir / "away.bin", dir / "p_train_000003.bin");
  EXPECT_NO_THROW(TokenFiles f(pattern));
  // A shard more.
  dir.write("p_train_000005.bin", shard(10, 5));
  expect_has(error_of([&] { TokenFiles f(pattern); }),
             {dir / "p_train_000005.bin' is not one of the 5 shards", dir / "p_manifest.json"});
  std::filesystem::remove(dir / "p_train_000005.bin");
  // A shard of another size (consistent with its own header), then one of other bytes.
  dir.write("p_train_000002.bin", shard(20, 2));
  expect_has(error_of([&] { TokenFiles f(pattern); }),
             {dir / "p_train_000002.bin' has 1064 bytes", "manifest", "says 1048"});
  dir.write("p_train_000002.bin", shard(12, 3));
  expect_has(error_of([&] { TokenFiles f(pattern); }),
             {dir / "p_train_000002.bin' has the FNV-1a checksum", "the same 1048 bytes", "changed"});
}

// A set prepared as "tiny_train" beside a set "tiny": the pattern of tiny's training shards also
// matches all of tiny_train's, its validation shard included. It trained on both, silently.
TEST(ShardManifest, APatternOverTwoSetsIsRefused) {
  TempDir dir;
  write_set(dir, "tiny", 2);
  write_set(dir, "tiny_train", 2);
  expect_has(error_of([&] { TokenFiles f(dir / "tiny_train_*.bin"); }),
             {"matches the shards of 2 prepare_tokens sets", dir / "tiny_manifest.json",
              dir / "tiny_train_manifest.json", "a run reads one set"});
  EXPECT_EQ(TokenFiles(dir / "tiny_train_0*.bin").files().size(), 2u);        // tiny's own, narrowed
  EXPECT_EQ(TokenFiles(dir / "tiny_train_train_*.bin").files().size(), 2u);  // tiny_train's
  EXPECT_EQ(TokenFiles(dir / "tiny_train_000001.bin").files().size(), 1u);    // a file by itself
}

TEST(ShardManifest, AMalformedManifestIsAnErrorNamingIt) {
  TempDir dir;
  write_set(dir, "p", 1);
  const std::string manifest = dir / "p_manifest.json";
  const std::string good = testing::read_bytes(manifest);
  auto with = [&](const std::string& text) {
    testing::write_bytes(manifest, text);
    return error_of([&] { TokenFiles f(dir / "p_*.bin"); });
  };
  expect_has(with("{"), {manifest, "not valid JSON"});
  expect_has(with("{}"), {manifest, "has no \"format\""});
  expect_has(with(R"({"format": "x"})"), {manifest, "is not a shard manifest", "\"x\""});
  auto edited = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    text.replace(text.find(from), from.size(), to);
    return with(text);
  };
  expect_has(edited("\"version\": 1", "\"version\": 2"), {manifest, "version 2"});
  expect_has(edited("\"shards\": 2", "\"shards\": 3"), {manifest, "says 3 shards but lists 2"});
  expect_has(edited("\"fnv1a64\": \"0x", "\"fnv1a64\": \"0y"), {manifest, "fnv1a64 must be"});
  expect_has(edited("\"name\": \"p_val", "\"name\": \"../p_val"), {manifest, ".name must be a file name"});
  expect_has(edited("\"bytes\": 1044", "\"bytes\": 1.5"), {manifest, "bytes must be an integer"});
  EXPECT_EQ(with(good), "");
}

}  // namespace zdl::data

// TokenDataset: seeded batches are pure functions of (seed, index), targets are the next
// bytes of the file, rank slices add up to the global batch, and bad inputs fail clearly.
#include "data/token_dataset.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>

#include "core/hash.h"
#include "core/rng.h"
#include "temp_dir.h"
#include "error_of.h"

namespace zdl::data {

namespace {

using testing::TempDir;

// Bytes with no repeating structure, so a window's position is identifiable.
std::string random_bytes(int64_t n, uint64_t seed = 7) {
  std::string s(static_cast<size_t>(n), '\0');
  for (int64_t i = 0; i < n; ++i) s[static_cast<size_t>(i)] = static_cast<char>(Philox::block(seed, 0, i)[0] & 0xFF);
  return s;
}

using ::zdl::testing::error_of;

std::vector<int64_t> concat(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  std::vector<int64_t> out = a;
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

}  // namespace

TEST(TokenDataset, BatchesAreDeterministicAcrossInstancesAndDifferAcrossSeeds) {
  TempDir dir;
  const std::string path = dir.write("d.bin", random_bytes(20000));
  TokenDataset a(path, {.batch_size = 4, .seq_len = 16, .seed = 42});
  TokenDataset b(path, {.batch_size = 4, .seq_len = 16, .seed = 42});
  TokenDataset c(path, {.batch_size = 4, .seq_len = 16, .seed = 43});
  for (int i = 0; i < 5; ++i) {
    Batch x = a.next_batch(), y = b.next_batch(), z = c.next_batch();
    EXPECT_EQ(x.inputs.shape(), (Shape{4, 16}));
    EXPECT_EQ(x.inputs.dtype(), DType::I64);
    EXPECT_EQ(x.targets.dtype(), DType::I64);
    EXPECT_EQ(x.inputs.to_int_vector(), y.inputs.to_int_vector()) << "batch " << i;
    EXPECT_EQ(x.targets.to_int_vector(), y.targets.to_int_vector()) << "batch " << i;
    EXPECT_NE(x.inputs.to_int_vector(), z.inputs.to_int_vector()) << "batch " << i;
  }
  // Consecutive batches differ too.
  EXPECT_NE(a.window_starts(Split::Train, 0), a.window_starts(Split::Train, 1));
}

TEST(TokenDataset, TargetsAreInputsShiftedByOneInTheFile) {
  TempDir dir;
  const std::string bytes = random_bytes(5000);
  const std::string path = dir.write("d.bin", bytes);
  const int64_t B = 8, T = 32;
  TokenDataset ds(path, {.batch_size = B, .seq_len = T, .seed = 1});
  for (int64_t i = 0; i < 20; ++i) {
    std::vector<int64_t> starts = ds.window_starts(Split::Train, i);
    Batch batch = ds.random_batch(Split::Train, i);
    auto x = batch.inputs.to_int_vector(), y = batch.targets.to_int_vector();
    for (int64_t b = 0; b < B; ++b) {
      const int64_t s = starts[static_cast<size_t>(b)];
      ASSERT_GE(s, 0);
      ASSERT_LE(s + T + 1, ds.split_size(Split::Train)) << "window leaves the train split";
      for (int64_t t = 0; t < T; ++t) {
        ASSERT_EQ(x[b * T + t], static_cast<unsigned char>(bytes[s + t]));
        ASSERT_EQ(y[b * T + t], static_cast<unsigned char>(bytes[s + t + 1]));
      }
    }
  }
}

TEST(TokenDataset, SplitsAreTheLeadingAndTrailingFractions) {
  TempDir dir;
  const std::string path = dir.write("d.bin", random_bytes(10000));
  TokenDataset ds(path, {.batch_size = 2, .seq_len = 8, .val_fraction = 0.1});
  EXPECT_EQ(ds.num_tokens(), 10000);
  EXPECT_EQ(ds.split_begin(Split::Train), 0);
  EXPECT_EQ(ds.split_size(Split::Train), 9000);
  EXPECT_EQ(ds.split_begin(Split::Val), 9000);
  EXPECT_EQ(ds.split_size(Split::Val), 1000);
  for (int64_t i = 0; i < 50; ++i) {
    for (int64_t s : ds.window_starts(Split::Val, i)) {
      EXPECT_GE(s, 9000);
      EXPECT_LE(s + 8 + 1, 10000);
    }
  }
  TokenDataset no_val(path, {.batch_size = 2, .seq_len = 8, .val_fraction = 0.0});
  EXPECT_EQ(no_val.split_size(Split::Val), 0);
  EXPECT_NE(error_of([&] { no_val.eval_batch(Split::Val, 0); }).find("val split, which is empty"), std::string::npos);
}

TEST(TokenDataset, SequentialEvalBatchesCoverConsecutiveRanges) {
  TempDir dir;
  const std::string bytes = random_bytes(1000);
  const std::string path = dir.write("d.bin", bytes);
  const int64_t B = 3, T = 10;
  TokenDataset ds(path, {.batch_size = B, .seq_len = T, .val_fraction = 0.2});
  // val split = bytes [800, 1000): (200 - 1) / 30 = 6 full batches.
  ASSERT_EQ(ds.num_eval_batches(Split::Val), 6);
  ASSERT_EQ(ds.num_eval_batches(Split::Train), (800 - 1) / 30);
  for (Split split : {Split::Train, Split::Val}) {
    const int64_t begin = ds.split_begin(split);
    for (int64_t i = 0; i < ds.num_eval_batches(split); ++i) {
      Batch batch = ds.eval_batch(split, i);
      auto x = batch.inputs.to_int_vector(), y = batch.targets.to_int_vector();
      // Batch i covers tokens [i*B*T, (i+1)*B*T + 1) of the split, row after row.
      for (int64_t k = 0; k < B * T; ++k) {
        ASSERT_EQ(x[k], static_cast<unsigned char>(bytes[begin + i * B * T + k])) << split_name(split) << " " << i;
        ASSERT_EQ(y[k], static_cast<unsigned char>(bytes[begin + i * B * T + k + 1])) << split_name(split) << " " << i;
      }
    }
  }
  std::string msg = error_of([&] { ds.eval_batch(Split::Val, 6); });
  EXPECT_NE(msg.find("eval batch 6 is out of range"), std::string::npos) << msg;
  EXPECT_NE(msg.find("holds 6 batches"), std::string::npos) << msg;
}

TEST(TokenDataset, RankSlicesConcatenateToTheGlobalBatch) {
  TempDir dir;
  const std::string path = dir.write("d.bin", random_bytes(8000));
  const int64_t B = 8, T = 12;
  TokenDataset global(path, {.batch_size = B, .seq_len = T, .seed = 5});
  for (int64_t N : {1, 2, 4}) {
    std::vector<TokenDataset> ranks;
    for (int64_t r = 0; r < N; ++r)
      ranks.emplace_back(path, TokenDatasetOptions{.batch_size = B, .seq_len = T, .seed = 5, .rank = r, .world_size = N});
    for (int64_t i = 0; i < 3; ++i) {
      std::vector<int64_t> x, y, ex, ey;
      for (auto& ds : ranks) {
        EXPECT_EQ(ds.local_batch_size(), B / N);
        Batch part = ds.next_batch();
        EXPECT_EQ(part.inputs.shape(), (Shape{B / N, T}));
        x = concat(x, part.inputs.to_int_vector());
        y = concat(y, part.targets.to_int_vector());
        Batch epart = ds.eval_batch(Split::Val, 0);
        ex = concat(ex, epart.inputs.to_int_vector());
        ey = concat(ey, epart.targets.to_int_vector());
      }
      Batch whole = global.random_batch(Split::Train, i);
      EXPECT_EQ(x, whole.inputs.to_int_vector()) << "N=" << N << " batch " << i;
      EXPECT_EQ(y, whole.targets.to_int_vector()) << "N=" << N << " batch " << i;
      EXPECT_EQ(ex, global.eval_batch(Split::Val, 0).inputs.to_int_vector()) << "N=" << N;
      EXPECT_EQ(ey, global.eval_batch(Split::Val, 0).targets.to_int_vector()) << "N=" << N;
    }
  }
}

TEST(TokenDataset, RestoredPositionReproducesTheFollowingBatches) {
  TempDir dir;
  const std::string path = dir.write("d.bin", random_bytes(6000));
  const TokenDatasetOptions opts{.batch_size = 4, .seq_len = 16, .seed = 99};
  TokenDataset run(path, opts);
  for (int i = 0; i < 7; ++i) run.next_batch();
  const int64_t saved = run.position();
  EXPECT_EQ(saved, 7);
  std::vector<std::vector<int64_t>> expected;
  for (int i = 0; i < 4; ++i) expected.push_back(run.next_batch().inputs.to_int_vector());

  TokenDataset resumed(path, opts);  // a fresh process
  resumed.set_position(saved);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(resumed.next_batch().inputs.to_int_vector(), expected[i]) << i;
  EXPECT_EQ(resumed.position(), 11);
  EXPECT_THROW(resumed.set_position(-1), Error);
}

TEST(TokenDataset, FingerprintDetectsAChangedFile) {
  // FNV-1a 64 reference values (draft-eastlake-fnv test vectors).
  EXPECT_EQ(fnv1a64(nullptr, 0), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64(reinterpret_cast<const uint8_t*>("a"), 1), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a64(reinterpret_cast<const uint8_t*>("foobar"), 6), 0x85944171f73967e8ull);

  TempDir dir;
  std::string bytes = random_bytes(3000);
  const std::string p1 = dir.write("a.bin", bytes);
  const std::string p2 = dir.write("b.bin", bytes);
  bytes[1234] = static_cast<char>(bytes[1234] ^ 1);
  const std::string p3 = dir.write("c.bin", bytes);
  const TokenDatasetOptions opts{.batch_size = 2, .seq_len = 8};
  TokenDataset a(p1, opts), b(p2, opts), c(p3, opts);
  EXPECT_EQ(a.fingerprint(), b.fingerprint());
  EXPECT_EQ(a.fingerprint().size, 3000);
  EXPECT_NE(a.fingerprint(), c.fingerprint());
  EXPECT_NO_THROW(b.expect_fingerprint(a.fingerprint()));
  std::string msg = error_of([&] { c.expect_fingerprint(a.fingerprint()); });
  EXPECT_NE(msg.find("changed since the checkpoint"), std::string::npos) << msg;
  EXPECT_NE(msg.find(a.fingerprint().to_string()), std::string::npos) << msg;
}

TEST(TokenDataset, MissingFileErrorNamesThePathAndReason) {
  TempDir dir;
  const std::string path = dir.file("nope.txt");
  std::string msg = error_of([&] { TokenDataset(path, {}); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("No such file or directory"), std::string::npos) << msg;
}

TEST(TokenDataset, EmptyFileAndDirectoryAreRejected) {
  TempDir dir;
  const std::string path = dir.write("empty.txt", "");
  std::string msg = error_of([&] { TokenDataset(path, {}); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("is empty"), std::string::npos) << msg;
  msg = error_of([&] { TokenDataset(dir.file(""), {}); });
  EXPECT_NE(msg.find("not a regular file"), std::string::npos) << msg;
}

// A FIFO is refused at once (opening one for reading would wait for a writer forever).
TEST(TokenDataset, FifoIsRefusedWithoutWaiting) {
  TempDir dir;
  const std::string fifo = dir.file("pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string msg = error_of([&] { TokenDataset(fifo, {}); });
  EXPECT_NE(msg.find("not a regular file"), std::string::npos) << msg;
}

// A data file truncated or rewritten in place during a run: the next batch is an error naming
// the file (not a SIGBUS from the lost pages, not silently other bytes).
TEST(TokenDataset, FileChangedDuringTheRunIsAnErrorNotASignal) {
  TempDir dir;
  const TokenDatasetOptions opts{.batch_size = 2, .seq_len = 8, .val_fraction = 0.0};
  const std::string path = dir.write("data.bin", random_bytes(3000));
  {
    TokenDataset ds(path, opts);
    EXPECT_NO_THROW(ds.step_rows(0, 0, 2));
    std::filesystem::resize_file(path, 100);  // truncated under the mapping
    std::string msg = error_of([&] { ds.step_rows(1, 0, 2); });
    EXPECT_NE(msg.find("changed during the run"), std::string::npos) << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
  }
  dir.write("data.bin", random_bytes(3000, 1));
  TokenDataset ds(path, opts);
  const auto opened_mtime = std::filesystem::last_write_time(path);
  dir.write("data.bin", random_bytes(3000, 2));  // rewritten in place, the same size
  // A rewrite within the file system's timestamp resolution keeps the mtime: move it on
  // explicitly, so only the mtime (not the size, not the inode) tells the change.
  std::filesystem::last_write_time(path, opened_mtime + std::chrono::seconds(1));
  std::string msg = error_of([&] { ds.step_rows(0, 0, 2); });
  EXPECT_NE(msg.find("rewritten in place"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
}

TEST(TokenDataset, UnreadableFileErrorNamesThePathAndReason) {
  TempDir dir;
  const std::string path = dir.write("locked.txt", random_bytes(100));
  std::filesystem::permissions(path, std::filesystem::perms::none);
  // Root reads files whatever their mode: it opens the file as user nobody (effective uid
  // only; the saved uid stays root, so it comes back).
  const bool root = ::geteuid() == 0;
  if (root) ASSERT_EQ(::seteuid(65534), 0) << "root could not take an unprivileged effective uid";
  std::string msg = error_of([&] { TokenDataset(path, {.batch_size = 1, .seq_len = 4}); });
  if (root) ASSERT_EQ(::seteuid(0), 0);
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("Permission denied"), std::string::npos) << msg;
}

TEST(TokenDataset, TooShortFileErrorNamesTheSizes) {
  TempDir dir;
  // B*T + 1 = 4*8 + 1 = 33 tokens needed per split.
  const std::string path = dir.write("short.txt", random_bytes(32));
  std::string msg = error_of([&] { TokenDataset(path, {.batch_size = 4, .seq_len = 8, .val_fraction = 0.0}); });
  EXPECT_NE(msg.find("train split has 32 tokens"), std::string::npos) << msg;
  EXPECT_NE(msg.find("B*T+1 = 4*8+1 = 33"), std::string::npos) << msg;
  // Exactly B*T + 1 is enough, and then there is exactly one eval batch.
  const std::string ok = dir.write("ok.txt", random_bytes(33));
  TokenDataset ds(ok, {.batch_size = 4, .seq_len = 8, .val_fraction = 0.0});
  EXPECT_EQ(ds.num_eval_batches(Split::Train), 1);
  // With B = 1 and T + 1 tokens there is exactly one window, at 0.
  TokenDataset one(ok, {.batch_size = 1, .seq_len = 32, .val_fraction = 0.0});
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(one.window_starts(Split::Train, i), (std::vector<int64_t>{0}));
  // A big enough train split but a too-small validation split.
  const std::string p2 = dir.write("small_val.txt", random_bytes(300));
  msg = error_of([&] { TokenDataset(p2, {.batch_size = 4, .seq_len = 8, .val_fraction = 0.1}); });
  EXPECT_NE(msg.find("val split has 30 tokens"), std::string::npos) << msg;
}

TEST(TokenDataset, BatchNotDivisibleByWorldSizeIsAnError) {
  TempDir dir;
  const std::string path = dir.write("d.bin", random_bytes(2000));
  std::string msg = error_of([&] { TokenDataset(path, {.batch_size = 6, .seq_len = 8, .rank = 1, .world_size = 4}); });
  EXPECT_NE(msg.find("[rank 1/4]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("batch_size 6 is not divisible by world_size 4"), std::string::npos) << msg;
  EXPECT_THROW(TokenDataset(path, {.batch_size = 4, .seq_len = 8, .rank = 4, .world_size = 4}), Error);
  EXPECT_THROW(TokenDataset(path, {.batch_size = 4, .seq_len = 8, .val_fraction = 1.0}), Error);
  EXPECT_THROW(TokenDataset(path, {.batch_size = 0, .seq_len = 8}), Error);
}

}  // namespace zdl::data

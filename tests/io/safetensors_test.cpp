// Safetensors: round trips of every dtype and odd shapes, the on-disk layout, atomic writes,
// and a catalogue of malformed files that must each be rejected with a message naming the
// file and the problem (never a crash, an out-of-bounds read or a huge allocation).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <optional>

#include "autograd/ops.h"
#include "io/safetensors.h"
#include "temp_dir.h"

namespace zdl::io {

namespace {

using testing::error_of;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

// The bytes of a tensor as laid out contiguously (the oracle for what the file must hold).
std::string bytes_of(const Tensor& t) {
  Tensor c = t.contiguous_copy();
  if (c.nbytes() == 0) return "";
  return std::string(static_cast<const char*>(c.raw_data()), c.nbytes());
}

// A safetensors file from a header text and data bytes; `len` overrides the length field.
std::string st_file(const std::string& header, const std::string& data = "", std::optional<uint64_t> len = {}) {
  uint64_t n = len ? *len : header.size();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

}  // namespace

TEST(Safetensors, RoundTripsEveryDTypeAndOddShapesWithMetadata) {
  TempDir dir;
  NamedTensors ts = {
      {"f32", Tensor::randn({3, 5}, 1)},
      {"f64", Tensor::randn({2, 1, 3}, 2, DType::F64)},
      {"bf16", Tensor::randn({7}, 3).to(DType::BF16)},
      {"f16", Tensor::randn({1, 1, 1, 3}, 4).to(DType::F16)},
      {"i32", Tensor::from_vector(std::vector<int64_t>{-1, 0, 7, 2147483647}, {4}, DType::I32)},
      {"i64", Tensor::from_vector(std::vector<int64_t>{-5, int64_t{1} << 40, 3, 9}, {2, 2}, DType::I64)},
      {"scalar", Tensor::scalar(3.25)},                 // 0-d: shape [], one element
      {"empty", Tensor::zeros({0})},                    // no bytes
      {"empty_3d", Tensor::zeros({3, 0, 2}, DType::I64)},
      {"h.0.attn.c_attn.weight", Tensor::randn({2, 6}, 5)},  // dotted names pass through
  };
  Metadata meta = {{"step", "1000"}, {"config", "{\"n_layer\": 2}"}, {"unicode", "\xc3\xa9t\xc3\xa9"}};
  const std::string path = dir / "all.safetensors";
  save_safetensors(path, ts, meta);

  SafetensorsFile f = load_safetensors(path);
  EXPECT_EQ(f.metadata, meta);
  ASSERT_EQ(f.tensors.size(), ts.size());
  for (auto& [name, t] : ts) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(f.tensors.count(name));
    const Tensor& got = f.tensors.at(name);
    EXPECT_EQ(got.dtype(), t.dtype());
    EXPECT_EQ(got.shape(), t.shape());
    EXPECT_TRUE(got.device().is_cpu());
    EXPECT_EQ(bytes_of(got), bytes_of(t));  // bit-exact, including bf16/f16 and int extremes
  }
  EXPECT_EQ(f.tensors.at("scalar").item(), 3.25);

  // Layout: header padded to 8, every tensor aligned to its element size, the buffer tiled.
  SafetensorsHeader h = read_safetensors_header(path);
  EXPECT_EQ(h.header_bytes % 8, 0u);
  EXPECT_EQ(h.metadata, meta);
  uint64_t total = 0;
  for (auto& e : h.entries) {
    EXPECT_EQ((8 + h.header_bytes + e.begin) % element_size(e.dtype), 0u) << e.name;
    total += e.nbytes();
  }
  EXPECT_EQ(h.file_bytes, 8 + h.header_bytes + total);
  ASSERT_NE(h.find("bf16"), nullptr);
  EXPECT_EQ(h.find("bf16")->dtype, DType::BF16);
  EXPECT_EQ(h.find("empty_3d")->shape, (Shape{3, 0, 2}));
  EXPECT_EQ(h.find("scalar")->shape, Shape{});
  EXPECT_EQ(h.find("nope"), nullptr);
  // The JSON itself spells dtypes as the spec does.
  std::string raw = read_bytes(path);
  EXPECT_NE(raw.find("\"dtype\":\"BF16\""), std::string::npos);
  EXPECT_NE(raw.find("\"__metadata__\""), std::string::npos);
}

TEST(Safetensors, NonContiguousTensorsAreWrittenContiguous) {
  TempDir dir;
  Tensor a = Tensor::randn({3, 4}, 7);
  Tensor at = transpose(a, 0, 1);          // [4, 3], strides [1, 4]
  Tensor every_other = slice(a, 1, 0, 4, 2);  // [3, 2], strides [4, 2]
  ASSERT_FALSE(at.is_contiguous());
  ASSERT_FALSE(every_other.is_contiguous());
  save_safetensors(dir / "nc.safetensors", {{"at", at}, {"eo", every_other}});
  SafetensorsFile f = load_safetensors(dir / "nc.safetensors");
  EXPECT_EQ(f.tensors.at("at").shape(), (Shape{4, 3}));
  EXPECT_EQ(f.tensors.at("at").to_vector(), at.to_vector());
  EXPECT_EQ(f.tensors.at("eo").to_vector(), every_other.to_vector());
  EXPECT_EQ(read_safetensors_header(dir / "nc.safetensors").find("at")->nbytes(), 12u * 4);
}

TEST(Safetensors, NewFilesGetTheUmasksPermissions) {
  // As any new file (torch.save, cp): readable by others where the umask allows, not mkstemp's 0600.
  TempDir dir;
  const std::string path = dir / "p.safetensors";
  for (mode_t mask : {mode_t{022}, mode_t{077}}) {
    const mode_t old_mask = ::umask(mask);
    save_safetensors(path, {{"x", Tensor::ones({4})}});
    ::umask(old_mask);
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0666u & ~mask) << "umask " << mask;
  }
}

TEST(Safetensors, WritesAtomicallyAndLeavesNoTemporaryFiles) {
  TempDir dir;
  const std::string path = dir / "w.safetensors";
  save_safetensors(path, {{"x", Tensor::ones({4})}});
  save_safetensors(path, {{"x", Tensor::full({2}, 5.0)}, {"y", Tensor::zeros({1})}});  // replaces
  SafetensorsFile f = load_safetensors(path);
  EXPECT_EQ(f.tensors.at("x").to_vector(), (std::vector<double>{5, 5}));
  int entries = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.path())) {
    ++entries;
    EXPECT_EQ(e.path().filename(), "w.safetensors");
  }
  EXPECT_EQ(entries, 1);
  // A failed write (bad input) leaves the existing file untouched and no debris.
  EXPECT_NE(error_of([&] { save_safetensors(path, {{"a", Tensor::ones({1})}, {"a", Tensor::ones({1})}}); })
                .find("appears twice"),
            std::string::npos);
  EXPECT_NE(error_of([&] { save_safetensors(path, {{"__metadata__", Tensor::ones({1})}}); }).find("reserved"),
            std::string::npos);
  EXPECT_NE(error_of([&] { save_safetensors(path, {{"", Tensor::ones({1})}}); }).find("empty name"),
            std::string::npos);
  EXPECT_EQ(load_safetensors(path).tensors.size(), 2u);
}

TEST(Safetensors, RejectsMalformedFilesNamingFileAndProblem) {
  TempDir dir;
  const std::string good_header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string eight(8, '\x01');
  struct Case {
    const char* name;
    std::string bytes;
    const char* expected;
  };
  std::string valid = st_file(good_header, eight);
  const Case cases[] = {
      {"empty_file", "", "too short for the 8-byte header length"},
      {"five_bytes", "abcde", "too short"},
      {"truncated_in_data", valid.substr(0, valid.size() - 3), "run past the data buffer"},
      {"truncated_in_header", valid.substr(0, 20), "runs past the end"},
      {"header_length_huge", st_file(good_header, eight, uint64_t{1} << 62), "exceeds the 100000000-byte limit"},
      {"header_length_max", st_file(good_header, eight, ~uint64_t{0}), "exceeds"},
      {"header_length_past_end", st_file(good_header, eight, good_header.size() + 9), "runs past the end"},
      {"header_not_json", st_file("{\"a\": nope}"), "not valid JSON"},
      {"header_not_object", st_file("[1,2,3]"), "does not start with '{'"},
      {"header_trailing_text", st_file("{\"a\":1} xx"), "not valid JSON"},
      {"entry_not_object", st_file(R"({"a":[1]})"), "entry 'a' must be an object"},
      {"missing_dtype", st_file(R"({"a":{"shape":[0],"data_offsets":[0,0]}})"), "has no \"dtype\""},
      {"bad_dtype", st_file(R"({"a":{"dtype":"F31","shape":[2],"data_offsets":[0,8]}})", eight), "dtype 'F31'"},
      {"unsupported_dtype", st_file(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})", eight),
       "dtype 'U8', which zdl does not support"},
      {"offsets_out_of_bounds", st_file(R"({"a":{"dtype":"F32","shape":[250],"data_offsets":[0,1000]}})", eight),
       "run past the data buffer of 8 bytes"},
      {"offsets_reversed", st_file(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", eight),
       "begin > end"},
      {"offsets_not_pair", st_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", eight),
       "data_offsets must be [begin, end]"},
      {"overlapping",
       st_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
               std::string(12, '\0')),
       "overlap"},
      {"size_mismatch", st_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight),
       "needs 12 bytes but data_offsets [0, 8] hold 8"},
      {"negative_shape", st_file(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,8]}})", eight),
       "shape[0] is negative"},
      {"fractional_shape", st_file(R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", eight),
       "must be a non-negative integer"},
      {"shape_overflow",
       st_file(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,8]}})", eight),
       "overflows 64-bit element counts"},
      {"bytes_overflow",
       st_file(R"({"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,8]}})", eight),
       "overflows 64-bit byte counts"},
      {"shape_dim_too_large",
       st_file(R"({"a":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,8]}})", eight),
       "is too large"},
      {"zero_dim_with_huge_others",  // numel 0 but strides would overflow
       st_file(R"({"a":{"dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}})"),
       "overflows 64-bit element counts"},
      {"gap_in_buffer",
       st_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight), "bytes [0, 4) of the data buffer"},
      {"trailing_bytes", st_file(good_header, eight + "junk"), "trailing garbage"},
      {"duplicate_name",
       st_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
               eight),
       "names 'a' twice"},
      {"metadata_not_strings", st_file(R"({"__metadata__":{"step":1}})"), "__metadata__[\"step\"] must be a string"},
      {"metadata_not_object", st_file(R"({"__metadata__":[]})"), "__metadata__ must be an object"},
      {"empty_name", st_file(R"({"":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}})"), "empty name"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = dir / (std::string(c.name) + ".safetensors");
    write_bytes(path, c.bytes);
    std::string msg = error_of([&] { load_safetensors(path); });
    EXPECT_NE(msg.find("safetensors file '" + path + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.expected), std::string::npos) << msg;
    EXPECT_EQ(error_of([&] { read_safetensors_header(path); }), msg);
  }
  EXPECT_NE(error_of([&] { load_safetensors(dir / "missing.safetensors"); }).find("cannot open"), std::string::npos);
  EXPECT_NE(error_of([&] { load_safetensors(dir.path()); }).find("not a regular file"), std::string::npos);

  // The control: the well-formed file the cases were cut from loads.
  write_bytes(dir / "valid.safetensors", valid);
  EXPECT_EQ(load_safetensors(dir / "valid.safetensors").tensors.at("a").shape(), Shape{2});
}

TEST(Safetensors, AcceptsPaddingAndEmptyTensorsAnywhere) {
  TempDir dir;
  // Trailing spaces in the header (as the spec pads), an empty tensor, an empty header.
  write_bytes(dir / "a.safetensors",
              st_file(R"({"e":{"dtype":"I64","shape":[0,3],"data_offsets":[4,4]},"a":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}}   )",
                      std::string("\x2a\0\0\0", 4)));
  SafetensorsFile f = load_safetensors(dir / "a.safetensors");
  EXPECT_EQ(f.tensors.at("a").to_int_vector(), std::vector<int64_t>{42});
  EXPECT_EQ(f.tensors.at("e").shape(), (Shape{0, 3}));
  write_bytes(dir / "b.safetensors", st_file("{}      "));
  EXPECT_TRUE(load_safetensors(dir / "b.safetensors").tensors.empty());
}

}  // namespace zdl::io

// Random-access reads (SafetensorsReader: one tensor or a flat element range, only its bytes)
// and streamed writes (SafetensorsStreamWriter: header first, data tensor by tensor), the two
// pieces sharded checkpoints and their consolidation are built on.
#include <gtest/gtest.h>

#include <filesystem>

#include "autograd/ops.h"
#include "io/safetensors.h"
#include "temp_dir.h"

namespace zdl::io {

namespace {
using testing::error_of;
using testing::TempDir;
}  // namespace

TEST(SafetensorsReader, ReadsOneTensorAndElementRangesWithoutTheOthers) {
  TempDir tmp;
  const std::string path = tmp / "a.safetensors";
  Tensor a = Tensor::arange(12, DType::F32), b = Tensor::arange(5, DType::F64);
  save_safetensors(path, {{"a", reshape(a, {3, 4})}, {"b", b}}, {{"k", "v"}});

  SafetensorsReader r(path);
  EXPECT_EQ(r.header().metadata.at("k"), "v");
  EXPECT_EQ(r.read("a").shape(), (Shape{3, 4}));
  EXPECT_EQ(r.read("a").to_vector(), a.to_vector());
  EXPECT_EQ(read_safetensors_tensor(path, "b").to_vector(), b.to_vector());

  Tensor part = Tensor::empty({4}, DType::F32);
  r.read_elements("a", 5, part);  // flat elements 5..8 of a [3, 4] tensor
  EXPECT_EQ(part.to_vector(), (std::vector<double>{5, 6, 7, 8}));
  Tensor conv = Tensor::empty({2}, DType::F32);  // f64 in the file, converted
  r.read_elements("b", 3, conv);
  EXPECT_EQ(conv.to_vector(), (std::vector<double>{3, 4}));

  std::string e = error_of([&] { r.read("nope"); });
  EXPECT_NE(e.find("has no tensor 'nope'"), std::string::npos) << e;
  e = error_of([&] { r.read_elements("a", 10, part); });
  EXPECT_NE(e.find("out of its 12 elements"), std::string::npos) << e;
}

TEST(SafetensorsStreamWriter, WritesHeaderFirstThenTensorsInOrder) {
  TempDir tmp;
  const std::string path = tmp / "s.safetensors";
  Tensor w = Tensor::randn({3, 2}, 1), v = Tensor::arange(4, DType::F32);
  {
    SafetensorsStreamWriter sw(path, {{"w", DType::F32, {2, 3}}, {"v", DType::F32, {4}}}, {{"format", "x"}});
    EXPECT_EQ(sw.next_name(), "w");
    sw.append("w", transpose(w, 0, 1));  // any layout: written contiguously
    sw.append("v", v);
    sw.commit();
  }
  SafetensorsFile f = load_safetensors(path);
  EXPECT_EQ(f.metadata.at("format"), "x");
  EXPECT_EQ(f.tensors.at("w").to_vector(), contiguous(transpose(w, 0, 1)).to_vector());
  EXPECT_EQ(f.tensors.at("v").to_vector(), v.to_vector());
}

TEST(SafetensorsStreamWriter, RejectsOutOfOrderMismatchedOrIncompleteWritesAndLeavesNoFile) {
  TempDir tmp;
  const std::string path = tmp / "s.safetensors";
  {
    SafetensorsStreamWriter sw(path, {{"a", DType::F32, {2}}, {"b", DType::F32, {3}}});
    std::string e = error_of([&] { sw.append("b", Tensor::zeros({3})); });
    EXPECT_NE(e.find("the next declared tensor is 'a'"), std::string::npos) << e;
    e = error_of([&] { sw.append("a", Tensor::zeros({3})); });
    EXPECT_NE(e.find("declared f32 [2]"), std::string::npos) << e;
    sw.append("a", Tensor::zeros({2}));
    e = error_of([&] { sw.commit(); });
    EXPECT_NE(e.find("starting with 'b'"), std::string::npos) << e;
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(std::filesystem::is_empty(tmp.path())) << "the temporary file must be removed";
  std::string e = error_of([&] {
    SafetensorsStreamWriter sw(path, {{"h", DType::BF16, {1}}, {"f", DType::F32, {1}}});
  });
  EXPECT_NE(e.find("largest element size first"), std::string::npos) << e;
}

}  // namespace zdl::io

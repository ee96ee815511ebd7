// How values read from files are checked and quoted in errors: strict integers, and
// json_shown(), which must survive the nesting a hostile file can carry (json's dump()
// recurses per level: 200k levels overflowed the stack of every reader's error path).
#include "io/json_fields.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "temp_dir.h"

namespace zdl::io {
namespace {

using json = nlohmann::json;
using testing::error_of;
using testing::TempDir;

std::string nested_array(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST(JsonFields, IntegersMustBeIntegersThatFit) {
  EXPECT_EQ(json_integer<int>(json(7), "x"), 7);
  EXPECT_EQ(json_integer<uint64_t>(json(UINT64_MAX), "x"), UINT64_MAX);
  EXPECT_NE(error_of([] { json_integer<int64_t>(json(6.7e79), "step"); }).find("step must be an integer, got 6.7e+79"),
            std::string::npos);
  EXPECT_NE(error_of([] { json_integer<int>(json(int64_t{1} << 40), "world_size"); }).find("out of range"),
            std::string::npos);
  EXPECT_NE(error_of([] { json_integer<uint64_t>(json(-1), "bytes"); }).find("out of range"), std::string::npos);
}

TEST(JsonFields, ShownValuesAreCutAndDeepNestingIsOnlyNamed) {
  EXPECT_EQ(json_shown(json(3)), "3");
  EXPECT_EQ(json_shown(json::parse(R"({"a":[1,2]})")), R"({"a":[1,2]})");
  EXPECT_EQ(json_shown(json::parse(nested_array(64))), nested_array(64));
  EXPECT_EQ(json_shown(json::parse(nested_array(65))), "(an array nested more than 64 levels deep)");
  EXPECT_EQ(json_shown(json(std::string(500, 'x'))), "\"" + std::string(199, 'x') + "...");
  const json deep = json::parse(nested_array(200000));  // the parser does not recurse
  EXPECT_EQ(json_shown(deep), "(an array nested more than 64 levels deep)");
}

// The readers quote a hostile value through json_shown: an error, not a stack overflow.
TEST(JsonFields, ReadersRejectDeeplyNestedValuesWithAnError) {
  TempDir tmp;
  const std::string deep = nested_array(200000);
  tmp.write("checkpoint.json", R"({"format": "zdl-checkpoint", "format_version": 1, "step": )" + deep + "}");
  std::string e = error_of([&] { read_train_state(tmp.path()); });
  EXPECT_NE(e.find("step must be an integer, got (an array nested more than 64 levels deep)"), std::string::npos) << e;

  const std::string header = R"({"t": {"dtype": )" + deep + R"(, "shape": [], "data_offsets": [0, 0]}})";
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[static_cast<size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  const std::string path = tmp.write("deep.safetensors", file + header);
  e = error_of([&] { read_safetensors_header(path); });
  EXPECT_NE(e.find("dtype must be a string, got (an array nested more than 64 levels deep)"), std::string::npos) << e;
}

}  // namespace
}  // namespace zdl::io

// libFuzzer target: the JSON files of checkpoints. The input is written as the layout.json
// of a sharded checkpoint (dist::read_sharded_train_state, and dist::consolidate_sharded,
// which goes on to index the pieces, parse the GPT config in the metadata and check shapes)
// and as the checkpoint.json of a single-file one (io::read_train_state). Each must return
// or throw zdl::Error: no crash, no overflow (UBSan), no unchecked allocation.
#include <filesystem>

#include "core/check.h"
#include "dist/sharded_checkpoint.h"
#include "fuzz/fuzz_common.h"
#include "io/checkpoint.h"

using namespace zdl;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = [] {
    std::string d = fuzz::scratch_dir() + "/ckpt";
    std::filesystem::create_directories(d);
    return d;
  }();
  static const std::string out = fuzz::scratch_dir() + "/consolidated.safetensors";
  fuzz::write_file(dir + "/layout.json", data, size);
  fuzz::write_file(dir + "/checkpoint.json", data, size);
  try {
    dist::read_sharded_train_state(dir);
  } catch (const Error&) {
  }
  try {
    dist::consolidate_sharded(dir, out);
  } catch (const Error&) {
  }
  try {
    io::read_train_state(dir);
  } catch (const Error&) {
  }
  return 0;
}

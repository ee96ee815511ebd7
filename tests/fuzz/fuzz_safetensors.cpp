// libFuzzer target: arbitrary bytes as a safetensors file. Every reader (header only, whole
// file, random access by tensor and by element range) and the GPT-2 import on top of it
// (io::config_from_gpt2_file; io::load_gpt2 into a tiny GPT, whose export is the seed
// gpt2_tiny.safetensors) must either return or throw zdl::Error: no crash, no out-of-bounds
// read (ASan), no allocation sized by an unchecked field (ctest runs this with
// -malloc_limit_mb), no undefined behaviour.
//
//   ninja -C build-fuzz fuzz_safetensors
//   build-fuzz/tests/fuzz/fuzz_safetensors tests/fuzz/corpus/safetensors -max_total_time=60
//   ZDL_FUZZ_WRITE_SEEDS=tests/fuzz/corpus/safetensors build-fuzz/tests/fuzz/fuzz_safetensors -runs=0
//     rewrites gpt2_tiny.safetensors
#include <algorithm>
#include <cstdlib>
#include <memory>

#include "core/check.h"
#include "fuzz/fuzz_common.h"
#include "io/gpt2_format.h"
#include "io/safetensors.h"
#include "nn/gpt.h"
#include "nn/parameter_factory.h"

using namespace zdl;

namespace {

std::shared_ptr<nn::GPT> tiny_gpt() {
  nn::InitContext ctx(1234);
  auto m = std::make_shared<nn::GPT>(
      nn::GPTConfig{.vocab_size = 16, .block_size = 4, .n_layer = 1, .n_head = 1, .n_embd = 4});
  if (const char* seeds = std::getenv("ZDL_FUZZ_WRITE_SEEDS"))
    io::export_gpt2(*m, std::string(seeds) + "/gpt2_tiny.safetensors");
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = fuzz::scratch_dir() + "/input.safetensors";
  fuzz::write_file(path, data, size);
  try {
    io::SafetensorsHeader h = io::read_safetensors_header(path);
    // A header that validates describes the file exactly: every tensor then loads.
    io::SafetensorsFile f = io::load_safetensors(path);
    ZDL_CHECK(f.tensors.size() == h.entries.size(), "load_safetensors: ", f.tensors.size(), " tensors but the header has ",
              h.entries.size());
    io::SafetensorsReader r(path);
    for (const auto& e : r.header().entries) {
      Tensor t = r.read(e.name);
      const int64_t n = t.numel();
      // A flat range of the middle, converted to another dtype, and one running past the end.
      Tensor dst = Tensor::empty({n / 2}, e.dtype == DType::F64 ? DType::F32 : DType::F64);
      r.read_elements(e.name, n / 4, dst);
      try {
        r.read_elements(e.name, n, Tensor::empty({1}, e.dtype));
        std::abort();  // out of range: must have thrown
      } catch (const Error&) {
      }
    }
  } catch (const Error&) {
    // A rejected file is the expected outcome for almost every input.
  }
  static const std::shared_ptr<nn::GPT> model = tiny_gpt();
  try {
    io::config_from_gpt2_file(path);
  } catch (const Error&) {
  }
  try {
    io::load_gpt2(*model, path);
  } catch (const Error&) {
  }
  return 0;
}

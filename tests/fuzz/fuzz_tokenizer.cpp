// libFuzzer target: the byte tokenizer. encode of any bytes decodes back to the same bytes;
// decode of arbitrary ids (the input read as int64s) returns or throws zdl::Error, and
// returns only when every id is a byte.
#include <cstring>
#include <vector>

#include "core/check.h"
#include "data/byte_tokenizer.h"

using namespace zdl;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  data::ByteTokenizer tok;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const std::vector<int64_t> ids = tok.encode(bytes);
  if (ids.size() != size || tok.decode(ids) != bytes) std::abort();  // lossless round trip

  std::vector<int64_t> raw(size / sizeof(int64_t));
  if (!raw.empty()) std::memcpy(raw.data(), data, raw.size() * sizeof(int64_t));
  bool all_bytes = true;
  for (int64_t id : raw) all_bytes &= id >= 0 && id < data::ByteTokenizer::kVocabSize;
  try {
    const std::string s = tok.decode(raw);
    if (!all_bytes || s.size() != raw.size() || tok.encode(s) != raw) std::abort();
  } catch (const Error&) {
    if (all_bytes) std::abort();  // a valid sequence must decode
  }
  return 0;
}

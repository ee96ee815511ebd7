// llm.c token shards; see llmc_shard.h.
#include "data/llmc_shard.h"

#include "core/check.h"

namespace zdl::data {

namespace {

// Header entry i (little-endian int32), read byte by byte: the same on any host.
int32_t header_entry(const MappedFile& file, int i) {
  const uint8_t* p = file.data() + 4 * i;
  return static_cast<int32_t>(static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
                              static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24);
}

}  // namespace

bool detect_llmc_shard(const MappedFile& file) {
  if (!file.path().ends_with(".bin") || file.size() < 4) return false;
  const int32_t magic = header_entry(file, 0);
  if (magic == kLlmcMagic) return true;
  if (file.size() < kLlmcHeaderBytes) return false;
  const int64_t n = header_entry(file, 2);
  const int64_t body = file.size() - kLlmcHeaderBytes;
  const bool shard_layout = n > 0 && (body == 2 * n || body == 4 * n);
  if (shard_layout)
    ZDL_CHECK(false, "'", file.path(), "' has a wrong magic for an llm.c token shard: ", magic, ", not ", kLlmcMagic,
              " (GPT-2 uint16 tokens), though it is laid out like one (a ", kLlmcHeaderBytes, "-byte header, then ", n,
              " tokens of ", body / n, " bytes); zerodl reads llm.c's GPT-2 shards only (not e.g. its Llama 3 ones, "
              "magic 20240801)");
  return false;
}

LlmcTokens llmc_shard_tokens(const MappedFile& file) {
  const std::string& path = file.path();
  ZDL_CHECK(file.size() >= kLlmcHeaderBytes, "llm.c shard '", path, "' is truncated: its header alone takes ",
            kLlmcHeaderBytes, " bytes, the file has ", file.size());
  const int32_t version = header_entry(file, 1);
  ZDL_CHECK(version == kLlmcVersion, "llm.c shard '", path, "' has version ", version,
            ", which zerodl does not read (only version ", kLlmcVersion, ": uint16 GPT-2 tokens)");
  const int64_t n = header_entry(file, 2);
  ZDL_CHECK(n >= 0, "llm.c shard '", path, "': its header gives a negative token count, ", n);
  const int64_t want = kLlmcHeaderBytes + kLlmcTokenBytes * n;
  ZDL_CHECK(file.size() >= want, "llm.c shard '", path, "' is truncated: its header says ", n, " tokens (", want,
            " bytes with the header), the file has ", file.size(), " bytes (",
            (file.size() - kLlmcHeaderBytes) / kLlmcTokenBytes, " tokens)");
  ZDL_CHECK(file.size() == want, "llm.c shard '", path, "' is longer than its header says: ", n, " tokens (", want,
            " bytes with the header), the file has ", file.size(), " bytes, ", file.size() - want,
            " more; it is not the file llm.c wrote");
  return {file.data() + kLlmcHeaderBytes, n};
}

std::string llmc_shard_header(int64_t count) {
  ZDL_CHECK(count >= 0 && count <= INT32_MAX, "llmc_shard_header: a shard holds 0 to 2^31 - 1 tokens, not ", count);
  std::string header(kLlmcHeaderBytes, '\0');
  const int32_t fields[] = {kLlmcMagic, kLlmcVersion, static_cast<int32_t>(count)};
  for (int i = 0; i < 3; ++i)
    for (int b = 0; b < 4; ++b) header[4 * i + b] = static_cast<char>(static_cast<uint32_t>(fields[i]) >> (8 * b));
  return header;
}

}  // namespace zdl::data

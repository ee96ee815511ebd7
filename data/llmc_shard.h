// llm.c's token shard format (written by its data preparation scripts, the GPT-2 flavour): a header of 256
// little-endian int32 — [0] magic 20240520, [1] version 1, [2] the token count n — then n
// little-endian uint16 GPT-2 token ids. Each shard of llm.c's datasets begins with the
// end-of-text token 50256, like every document inside it.
//
// A file is read as a shard when its name ends in .bin and it starts with the magic: the name
// alone decides nothing (a text file named .bin stays bytes), and the magic alone neither. A
// .bin file laid out like a shard (a 1024-byte header whose count n makes the file exactly
// 1024 + 2n or 1024 + 4n bytes) but with another magic is refused ("wrong magic") rather than
// read as bytes: it is some other token format (llm.c's Llama 3 shards: magic 20240801, uint32
// tokens), not text.
//
//   if (data::detect_llmc_shard(file)) {
//     data::LlmcTokens t = data::llmc_shard_tokens(file);   // t.ids: 2 bytes each, t.count of them
//   }
//   std::string header = data::llmc_shard_header(n);        // to write a shard: then n uint16 ids
#pragma once
#include <cstdint>
#include <string>

#include "data/mapped_file.h"

namespace zdl::data {

inline constexpr int32_t kLlmcMagic = 20240520;
inline constexpr int32_t kLlmcVersion = 1;
inline constexpr int64_t kLlmcHeaderBytes = 256 * 4;
inline constexpr int64_t kLlmcTokenBytes = 2;
// GPT-2's BPE vocabulary, which llm.c's GPT-2 shards use (50256 is <|endoftext|>), and the
// multiple a model's vocabulary is padded to for the matmuls (50257 -> 50304), as llm.c does.
inline constexpr int64_t kGpt2VocabSize = 50257;
inline constexpr int64_t kGpt2VocabMultiple = 128;

// True if `file` is an llm.c shard (named *.bin, starting with kLlmcMagic), false if it is to be
// read as bytes. Throws, naming the file and both magics, for a *.bin file laid out like a shard
// with another magic.
bool detect_llmc_shard(const MappedFile& file);

struct LlmcTokens {
  const uint8_t* ids = nullptr;  // `count` little-endian uint16, inside the mapping
  int64_t count = 0;
};

// The tokens of a file detect_llmc_shard accepted, after checking the rest of its header:
// version 1, and exactly 1024 + 2n bytes for the n tokens it declares (shorter: truncated;
// longer: not what was written). Errors name the file and the numbers.
LlmcTokens llmc_shard_tokens(const MappedFile& file);

// The header of a shard of `count` tokens: kLlmcHeaderBytes bytes, little-endian on any host.
// Throws unless 0 <= count < 2^31 (the header's int32).
std::string llmc_shard_header(int64_t count);

}  // namespace zdl::data

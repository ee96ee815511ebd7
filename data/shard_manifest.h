// The manifest of a shard set prepare_tokens writes: PREFIX_manifest.json, renamed into place
// LAST, after every shard of the set (PREFIX_val_NNNNNN.bin, PREFIX_train_NNNNNN.bin). It makes
// the set atomic as a set: a run interrupted while renaming leaves shards but no manifest, and
// a reader that finds the manifest knows the shards it lists are all there is.
//
//   {"format": "zerodl-llmc-shards", "version": 1, "shards": 2,
//    "files": [{"name": "tiny_val_000000.bin", "bytes": 2048, "fnv1a64": "0x0123456789abcdef"}, ...]}
//
// Its shards carry a tag in their header (entry 3, zero in llm.c's own shards), so a set whose
// manifest is missing is told apart from llm.c's shards, which never have one:
// check_shard_manifests() refuses the first and reads the second.
//
//   std::string header = data::manifest_shard_header(n);        // then n uint16 ids
//   io::AtomicFileWriter(data::shard_manifest_path("shards/tiny")) ... shard_manifest_json(shards)
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/data_fingerprint.h"
#include "data/mapped_file.h"

namespace zdl::data {

inline constexpr const char* kShardManifestFormat = "zerodl-llmc-shards";
inline constexpr int64_t kShardManifestVersion = 1;
// Header entry 3 of a shard prepare_tokens wrote ("zdlm" in its bytes).
inline constexpr int32_t kManifestShardTag = 0x6d6c647a;

struct ManifestShard {
  std::string name;  // the file's name, in the manifest's directory
  int64_t bytes = 0;
  uint64_t fnv1a = 0;  // FNV-1a 64 of all its bytes
  bool operator==(const ManifestShard&) const = default;
};

// PREFIX_manifest.json.
std::string shard_manifest_path(const std::string& prefix);
// The PREFIX of a path named PREFIX_val_N.bin or PREFIX_train_N.bin (N: digits); nullopt for
// any other name.
std::optional<std::string> shard_prefix(const std::string& path);

// llmc_shard_header(count) with the tag.
std::string manifest_shard_header(int64_t count);
// True if `shard` (an llm.c shard) carries the tag.
bool has_manifest_tag(const MappedFile& shard);

std::string shard_manifest_json(const std::vector<ManifestShard>& shards);
// Throws, naming the file, for anything but a manifest this version wrote.
std::vector<ManifestShard> read_shard_manifest(const std::string& path);

// Checks llm.c shards (in stream order) against the manifests beside them: a shard named by
// prepare_tokens whose manifest exists must be listed there with its size and checksum (this
// reads every byte of the shards it covers, once), and of a `pattern`, every listed shard the
// pattern matches must have been matched. A tagged shard without its manifest is refused (an
// interrupted prepare_tokens); llm.c's untagged shards need none. Errors name the file, the
// manifest and the numbers. Returns each shard's fingerprint when every shard was checked
// against a manifest (what was hashed need not be read again), else nothing.
std::vector<DataFingerprint> check_shard_manifests(const std::string& source, bool pattern,
                                                   const std::vector<const MappedFile*>& shards);

}  // namespace zdl::data

// Safetensors: the tensor file format of the wider ecosystem (HF hub, PyTorch, JAX loaders),
// used for zdl checkpoints and GPT-2 exports (DESIGN.md mechanism 7).
//
// Layout: 8-byte little-endian header length N, N bytes of UTF-8 JSON
//   {"<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"<key>": "<string value>"}}
// padded with spaces to a multiple of 8, then the data buffer; offsets are relative to the
// start of the buffer, tensors are row-major little-endian and tile the buffer exactly.
//
// Choices:
// - Writing goes to a temporary file in the target's directory, is fsync'ed, then renamed
//   over the target (and the directory fsync'ed): a reader sees the old file or the new one,
//   never a torn one. Tensors are laid out largest element size first so every tensor is
//   aligned to its element size (the header is padded to 8), as the reference writer does.
// - Reading validates the whole header before it allocates a tensor or reads a data byte:
//   a malformed or hostile file fails with a zdl::Error naming the file and the problem,
//   never reads out of bounds and never allocates from a size field it has not checked
//   against the file's real size. Tensors are read straight into their own storage (no
//   second copy of the file in memory).
// - Only the dtypes zdl has (F32, F64, BF16, F16, I32, I64); a file holding others (e.g. U8,
//   BOOL) is rejected naming the tensor. Byte order: little-endian hosts only (checked at
//   compile time).
//
//   io::save_safetensors("model.safetensors", model->state_dict(), {{"step", "1000"}});
//   io::SafetensorsFile f = io::load_safetensors("model.safetensors");
//   f.tensors.at("wte.weight");   // CPU tensor
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace zdl::io {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using Metadata = std::map<std::string, std::string>;

// Header size cap (as the reference implementation): larger headers are rejected unread.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// One entry of a header, validated. Offsets are relative to the data buffer.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t nbytes() const { return end - begin; }
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // in data-buffer order
  Metadata metadata;
  uint64_t header_bytes = 0;  // N, the JSON length (padding included)
  uint64_t file_bytes = 0;
  // The entry called `name`, or nullptr.
  const SafetensorsEntry* find(const std::string& name) const;
};

struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;  // CPU, contiguous
  Metadata metadata;
};

// Writes tensors (any device, layout and zdl dtype; written as contiguous CPU bytes) and
// metadata to `path` atomically. Names must be unique, non-empty and not "__metadata__".
void save_safetensors(const std::string& path, const NamedTensors& tensors, const Metadata& metadata = {});

// Reads and validates the whole file; every tensor comes back as a CPU tensor.
SafetensorsFile load_safetensors(const std::string& path);

// Reads and validates only the header (names, dtypes, shapes, offsets, metadata) without
// reading the data: for inspecting a file or inferring a model's architecture from it.
SafetensorsHeader read_safetensors_header(const std::string& path);

// Safetensors' dtype spelling ("F32", "BF16", ...) of a zdl dtype, and back (throws).
const char* safetensors_dtype_name(DType t);
DType dtype_from_safetensors_name(const std::string& name);

}  // namespace zdl::io

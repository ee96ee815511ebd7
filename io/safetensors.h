// Safetensors: the tensor file format of the wider ecosystem (HF hub, PyTorch, JAX loaders),
// used for zdl checkpoints and GPT-2 exports (docs/design.md, mechanism 7).
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
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace zdl::io {

class InputFile;
class AtomicFileWriter;

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

// Random access to one file's tensors: the header is read and validated once (as
// load_safetensors does), then tensors, or flat element ranges of them, are read on demand,
// each touching only its own bytes. For files too large to load whole (sharded checkpoints).
//
//   io::SafetensorsReader r("rank-0-of-4.safetensors");
//   Tensor m = r.read("h.0.ln_1.weight:master@0");
//   r.read_elements("wte.weight", 100, dst);   // elements [100, 100 + dst.numel()), flat
class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::string& path);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::string& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  // The entry called `name`, or an error naming the file and the tensor.
  const SafetensorsEntry& entry(const std::string& name) const;
  // The whole tensor, as a CPU tensor of the file's dtype.
  Tensor read(const std::string& name) const;
  // Flat elements [begin, begin + dst.numel()) of tensor `name` into dst (contiguous, CPU);
  // converted when dst's dtype differs from the file's.
  void read_elements(const std::string& name, int64_t begin, const Tensor& dst) const;

 private:
  std::string path_;
  std::unique_ptr<InputFile> file_;
  SafetensorsHeader header_;
  std::map<std::string, size_t> index_;  // name -> header_.entries
};

// One tensor of a file, read by name without reading the others.
Tensor read_safetensors_tensor(const std::string& path, const std::string& name);

// What a streamed file will hold, declared before any data is written.
struct SafetensorsTensorSpec {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
};

// Writes a safetensors file tensor by tensor, for outputs larger than memory: the header is
// computed from `specs` (data laid out in that order) and written first, then each tensor's
// bytes are appended in the same order; commit() makes the file appear atomically (temp
// file + fsync + rename, as save_safetensors). Order the specs largest element size first
// (as save_safetensors does) so every tensor is aligned; a misaligned order is rejected.
//
//   io::SafetensorsStreamWriter w("out.safetensors", {{"a", DType::F32, {2, 3}}, {"b", DType::F32, {4}}});
//   w.append("a", a); w.append("b", b);
//   w.commit();   // throws unless every declared tensor was appended
class SafetensorsStreamWriter {
 public:
  SafetensorsStreamWriter(const std::string& path, std::vector<SafetensorsTensorSpec> specs,
                          const Metadata& metadata = {});
  ~SafetensorsStreamWriter();
  SafetensorsStreamWriter(const SafetensorsStreamWriter&) = delete;
  SafetensorsStreamWriter& operator=(const SafetensorsStreamWriter&) = delete;

  // The next declared tensor: name, dtype and shape must match it (any device or layout).
  void append(const std::string& name, const Tensor& t);
  void commit();
  // Name of the tensor append() expects next ("" when all were written).
  std::string next_name() const;

 private:
  std::string path_;
  std::vector<SafetensorsTensorSpec> specs_;
  size_t next_ = 0;
  std::unique_ptr<AtomicFileWriter> out_;
};

// Safetensors' dtype spelling ("F32", "BF16", ...) of a zdl dtype, and back (throws).
const char* safetensors_dtype_name(DType t);
DType dtype_from_safetensors_name(const std::string& name);

}  // namespace zdl::io

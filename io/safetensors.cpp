#include "io/safetensors.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "io/file.h"
#include "io/json_fields.h"

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; zdl's io/ reads and writes host bytes directly");

namespace zdl::io {

namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

// Every reader error starts with the file's name.
#define ZDL_ST_CHECK(cond, ...) ZDL_CHECK(cond, "safetensors file '", path, "': ", __VA_ARGS__)

const std::pair<const char*, DType> kDTypes[] = {{"F32", DType::F32}, {"F64", DType::F64}, {"BF16", DType::BF16},
                                                 {"F16", DType::F16}, {"I32", DType::I32}, {"I64", DType::I64}};

std::string json_type(const json& j) { return j.type_name(); }

// A non-negative JSON integer as uint64, or an error naming `what`.
uint64_t read_uint(const std::string& path, const json& j, const std::string& what) {
  if (j.is_number_unsigned()) return j.get<uint64_t>();
  ZDL_ST_CHECK(!j.is_number_integer(), what, " is negative (", json_shown(j), ")");
  ZDL_ST_CHECK(false, what, " must be a non-negative integer, got ", json_shown(j), " (", json_type(j), ")");
  return 0;
}

SafetensorsEntry parse_entry(const std::string& path, const std::string& name, const json& e, uint64_t buffer_bytes) {
  ZDL_ST_CHECK(!name.empty(), "a tensor has an empty name");
  ZDL_ST_CHECK(e.is_object(), "entry '", name, "' must be an object, got ", json_type(e));
  for (const char* key : {"dtype", "shape", "data_offsets"})
    ZDL_ST_CHECK(e.contains(key), "entry '", name, "' has no \"", key, "\"");
  SafetensorsEntry out;
  out.name = name;

  const json& dt = e["dtype"];
  ZDL_ST_CHECK(dt.is_string(), "tensor '", name, "': dtype must be a string, got ", json_shown(dt));
  const std::string dts = dt.get<std::string>();
  bool known = false;
  for (auto& [n, t] : kDTypes)
    if (dts == n) out.dtype = t, known = true;
  ZDL_ST_CHECK(known, "tensor '", name, "' has dtype '", dts,
               "', which zdl does not support (F32, F64, BF16, F16, I32, I64)");

  const json& sh = e["shape"];
  ZDL_ST_CHECK(sh.is_array(), "tensor '", name, "': shape must be an array, got ", json_shown(sh));
  // numel and the product of the non-zero dims must both fit in int64 (the latter bounds every
  // contiguous stride, so a [0, 2^40, 2^40] tensor cannot overflow them either).
  int64_t nonzero_product = 1;
  for (size_t d = 0; d < sh.size(); ++d) {
    uint64_t v = read_uint(path, sh[d], "tensor '" + name + "': shape[" + std::to_string(d) + "]");
    ZDL_ST_CHECK(v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), "tensor '", name, "': shape[", d,
                 "]=", v, " is too large");
    out.shape.push_back(static_cast<int64_t>(v));
    if (v != 0)
      ZDL_ST_CHECK(!__builtin_mul_overflow(nonzero_product, static_cast<int64_t>(v), &nonzero_product), "tensor '",
                   name, "': shape ", json_shown(sh), " overflows 64-bit element counts");
  }
  const int64_t numel = numel_of(out.shape);  // <= nonzero_product: no overflow
  uint64_t nbytes = 0;
  ZDL_ST_CHECK(!__builtin_mul_overflow(static_cast<uint64_t>(numel), static_cast<uint64_t>(element_size(out.dtype)),
                                       &nbytes),
               "tensor '", name, "': shape ", json_shown(sh), " overflows 64-bit byte counts");

  const json& off = e["data_offsets"];
  ZDL_ST_CHECK(off.is_array() && off.size() == 2, "tensor '", name, "': data_offsets must be [begin, end], got ",
               json_shown(off));
  out.begin = read_uint(path, off[0], "tensor '" + name + "': data_offsets[0]");
  out.end = read_uint(path, off[1], "tensor '" + name + "': data_offsets[1]");
  ZDL_ST_CHECK(out.begin <= out.end, "tensor '", name, "': data_offsets [", out.begin, ", ", out.end,
               "] has begin > end");
  ZDL_ST_CHECK(out.end <= buffer_bytes, "tensor '", name, "': data_offsets [", out.begin, ", ", out.end,
               "] run past the data buffer of ", buffer_bytes, " bytes (truncated file?)");
  ZDL_ST_CHECK(out.end - out.begin == nbytes, "tensor '", name, "': shape ", shape_str(out.shape), " of ", dts,
               " needs ", nbytes, " bytes but data_offsets [", out.begin, ", ", out.end, "] hold ",
               out.end - out.begin);
  return out;
}

SafetensorsHeader parse_header(const InputFile& f) {
  const std::string& path = f.path();
  SafetensorsHeader h;
  h.file_bytes = f.size();
  ZDL_ST_CHECK(h.file_bytes >= 8, "the file is ", h.file_bytes,
               " bytes, too short for the 8-byte header length (truncated or not safetensors)");
  unsigned char len[8];
  f.read_exact(0, len, 8, "the header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  ZDL_ST_CHECK(n <= kMaxSafetensorsHeaderBytes, "header length ", n, " exceeds the ", kMaxSafetensorsHeaderBytes,
               "-byte limit (corrupt or not safetensors)");
  ZDL_ST_CHECK(n <= h.file_bytes - 8, "header length ", n, " runs past the end of the ", h.file_bytes,
               "-byte file (truncated or not safetensors)");
  ZDL_ST_CHECK(n >= 2, "header length ", n, " is too small to hold a JSON object");
  h.header_bytes = n;
  std::string text(n, '\0');
  f.read_exact(8, text.data(), n, "the JSON header");
  ZDL_ST_CHECK(text[0] == '{', "the header does not start with '{' (not safetensors?)");

  // nlohmann keeps the last of duplicate keys silently; a duplicated tensor name would hide
  // bytes, so top-level duplicates are caught while parsing.
  std::set<std::string> keys;
  std::string duplicate;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::key && depth == 1 && !keys.insert(parsed.get<std::string>()).second)
      duplicate = parsed.get<std::string>();
    return true;
  };
  json j = json::parse(text, cb, /*allow_exceptions=*/false);
  ZDL_ST_CHECK(!j.is_discarded(), "the header is not valid JSON");
  ZDL_ST_CHECK(duplicate.empty(), "the header names '", duplicate, "' twice");
  ZDL_ST_CHECK(j.is_object(), "the header must be a JSON object, got ", json_type(j));

  const uint64_t buffer_bytes = h.file_bytes - 8 - n;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      ZDL_ST_CHECK(it->is_object(), "__metadata__ must be an object of strings, got ", json_type(*it));
      for (auto m = it->begin(); m != it->end(); ++m) {
        ZDL_ST_CHECK(m->is_string(), "__metadata__[\"", m.key(), "\"] must be a string, got ", json_shown(*m));
        h.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    h.entries.push_back(parse_entry(path, it.key(), *it, buffer_bytes));
  }

  // The spec: tensors tile the buffer, no gaps, no overlaps (empty tensors sit anywhere).
  std::sort(h.entries.begin(), h.entries.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  const SafetensorsEntry* prev = nullptr;
  for (const auto& e : h.entries) {
    if (e.nbytes() == 0) {
      ZDL_ST_CHECK(e.begin <= buffer_bytes, "empty tensor '", e.name, "' has offset ", e.begin, " past the buffer");
      continue;
    }
    ZDL_ST_CHECK(e.begin >= covered, "tensors '", prev->name, "' [", prev->begin, ", ", prev->end, ") and '", e.name,
                 "' [", e.begin, ", ", e.end, ") overlap");
    ZDL_ST_CHECK(e.begin == covered, "bytes [", covered, ", ", e.begin, ") of the data buffer belong to no tensor");
    covered = e.end;
    prev = &e;
  }
  ZDL_ST_CHECK(covered == buffer_bytes, "bytes [", covered, ", ", buffer_bytes,
               ") of the data buffer belong to no tensor (trailing garbage?)");
  return h;
}

// Writes the 8-byte length and the JSON header of tensors laid out in `specs` order.
void write_header(AtomicFileWriter& w, const char* who, const std::string& path,
                  const std::vector<SafetensorsTensorSpec>& specs, const Metadata& metadata) {
  ordered_json header = ordered_json::object();
  if (!metadata.empty()) {
    ordered_json m = ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = m;
  }
  uint64_t offset = 0;
  for (const auto& sp : specs) {
    const uint64_t nbytes = static_cast<uint64_t>(numel_of(sp.shape)) * element_size(sp.dtype);
    ordered_json e = ordered_json::object();
    e["dtype"] = safetensors_dtype_name(sp.dtype);
    e["shape"] = sp.shape;
    e["data_offsets"] = {offset, offset + nbytes};
    header[sp.name] = e;
    offset += nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {  // e.g. a name or value that is not UTF-8
    ZDL_CHECK(false, who, "('", path, "'): cannot encode the header: ", e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  ZDL_CHECK(text.size() <= kMaxSafetensorsHeaderBytes, who, "('", path, "'): header of ", text.size(),
            " bytes exceeds the format's limit");
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(static_cast<uint64_t>(text.size()) >> (8 * i));
  w.write(len, 8);
  w.write(text.data(), text.size());
}

}  // namespace

const SafetensorsEntry* SafetensorsHeader::find(const std::string& name) const {
  for (const auto& e : entries)
    if (e.name == name) return &e;
  return nullptr;
}

const char* safetensors_dtype_name(DType t) {
  for (auto& [n, d] : kDTypes)
    if (d == t) return n;
  ZDL_CHECK(false, "safetensors: no name for dtype ", dtype_name(t));
  return "";
}

DType dtype_from_safetensors_name(const std::string& name) {
  for (auto& [n, d] : kDTypes)
    if (name == n) return d;
  ZDL_CHECK(false, "safetensors: dtype '", name, "' is not supported by zdl (F32, F64, BF16, F16, I32, I64)");
  return DType::F32;
}

void save_safetensors(const std::string& path, const NamedTensors& tensors, const Metadata& metadata) {
  std::set<std::string> names;
  for (const auto& [name, t] : tensors) {
    ZDL_CHECK(!name.empty(), "save_safetensors('", path, "'): a tensor has an empty name");
    ZDL_CHECK(name != "__metadata__", "save_safetensors('", path, "'): '__metadata__' is reserved");
    ZDL_CHECK(names.insert(name).second, "save_safetensors('", path, "'): the name '", name, "' appears twice");
    ZDL_CHECK(t.defined(), "save_safetensors('", path, "'): tensor '", name, "' is undefined");
  }
  // Largest element first: with the header padded to 8, every tensor is then aligned to
  // its element size in the file (what the reference writer does).
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return element_size(tensors[a].second.dtype()) > element_size(tensors[b].second.dtype());
  });

  std::vector<SafetensorsTensorSpec> specs;
  for (size_t i : order) specs.push_back({tensors[i].first, tensors[i].second.dtype(), tensors[i].second.shape()});

  AtomicFileWriter w(path);
  write_header(w, "save_safetensors", path, specs, metadata);
  for (size_t i : order) {
    const Tensor& t = tensors[i].second;
    if (t.nbytes() == 0) continue;
    Tensor c = t.device().is_cpu() ? t : t.to(Device::cpu());
    if (!c.is_contiguous()) c = c.contiguous_copy();
    w.write(c.raw_data(), c.nbytes());
  }
  w.commit();
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  InputFile f(path);
  return parse_header(f);
}

SafetensorsFile load_safetensors(const std::string& path) {
  InputFile f(path);
  SafetensorsHeader h = parse_header(f);  // everything below is within bounds already
  SafetensorsFile out;
  out.metadata = std::move(h.metadata);
  const uint64_t data_start = 8 + h.header_bytes;
  for (const auto& e : h.entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    if (e.nbytes() > 0)
      f.read_exact(data_start + e.begin, t.raw_data(), e.nbytes(), ("tensor '" + e.name + "'").c_str());
    out.tensors.emplace(e.name, std::move(t));
  }
  return out;
}

}  // namespace zdl::io

namespace zdl::io {

// ---- SafetensorsReader ----

SafetensorsReader::SafetensorsReader(const std::string& path)
    : path_(path), file_(std::make_unique<InputFile>(path)), header_(parse_header(*file_)) {
  for (size_t i = 0; i < header_.entries.size(); ++i) index_.emplace(header_.entries[i].name, i);
}

SafetensorsReader::~SafetensorsReader() = default;

const SafetensorsEntry& SafetensorsReader::entry(const std::string& name) const {
  auto it = index_.find(name);
  ZDL_CHECK(it != index_.end(), "safetensors file '", path_, "' has no tensor '", name, "'");
  return header_.entries[it->second];
}

Tensor SafetensorsReader::read(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  Tensor t = Tensor::empty(e.shape, e.dtype);
  if (e.nbytes() > 0)
    file_->read_exact(8 + header_.header_bytes + e.begin, t.raw_data(), e.nbytes(), ("tensor '" + name + "'").c_str());
  return t;
}

void SafetensorsReader::read_elements(const std::string& name, int64_t begin, const Tensor& dst) const {
  const SafetensorsEntry& e = entry(name);
  const int64_t n = dst.numel(), numel = numel_of(e.shape);
  ZDL_CHECK(dst.device().is_cpu() && dst.is_contiguous(), "SafetensorsReader::read_elements('", path_, "', '", name,
            "'): dst must be a contiguous CPU tensor");
  ZDL_CHECK(begin >= 0 && begin <= numel && n <= numel - begin, "safetensors file '", path_, "': elements [", begin,
            ", ", begin + n, ") of tensor '", name, "' are out of its ", numel, " elements");
  if (n == 0) return;
  Tensor buf = dst.dtype() == e.dtype ? dst : Tensor::empty({n}, e.dtype);
  const uint64_t es = element_size(e.dtype);
  file_->read_exact(8 + header_.header_bytes + e.begin + static_cast<uint64_t>(begin) * es, buf.raw_data(),
                    static_cast<size_t>(n) * es, ("tensor '" + name + "'").c_str());
  if (!buf.same(dst)) dst.copy_(Tensor::from_storage(buf.storage(), dst.shape(), dst.strides(), 0, e.dtype));
}

Tensor read_safetensors_tensor(const std::string& path, const std::string& name) {
  return SafetensorsReader(path).read(name);
}

// ---- SafetensorsStreamWriter ----

SafetensorsStreamWriter::SafetensorsStreamWriter(const std::string& path, std::vector<SafetensorsTensorSpec> specs,
                                                 const Metadata& metadata)
    : path_(path), specs_(std::move(specs)) {
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& sp : specs_) {
    ZDL_CHECK(!sp.name.empty(), "SafetensorsStreamWriter('", path, "'): a tensor has an empty name");
    ZDL_CHECK(sp.name != "__metadata__", "SafetensorsStreamWriter('", path, "'): '__metadata__' is reserved");
    ZDL_CHECK(names.insert(sp.name).second, "SafetensorsStreamWriter('", path, "'): the name '", sp.name,
              "' appears twice");
    for (int64_t d : sp.shape)
      ZDL_CHECK(d >= 0, "SafetensorsStreamWriter('", path, "'): tensor '", sp.name, "' has shape ", shape_str(sp.shape));
    const uint64_t es = element_size(sp.dtype);
    ZDL_CHECK(offset % es == 0, "SafetensorsStreamWriter('", path, "'): tensor '", sp.name, "' (", dtype_name(sp.dtype),
              ") would start at byte ", offset, ", not a multiple of its element size: order the tensors largest "
              "element size first");
    offset += static_cast<uint64_t>(numel_of(sp.shape)) * es;
  }
  out_ = std::make_unique<AtomicFileWriter>(path);
  write_header(*out_, "SafetensorsStreamWriter", path, specs_, metadata);
}

SafetensorsStreamWriter::~SafetensorsStreamWriter() = default;

std::string SafetensorsStreamWriter::next_name() const { return next_ < specs_.size() ? specs_[next_].name : ""; }

void SafetensorsStreamWriter::append(const std::string& name, const Tensor& t) {
  ZDL_CHECK(next_ < specs_.size(), "SafetensorsStreamWriter('", path_, "'): append('", name,
            "') after all declared tensors were written");
  const SafetensorsTensorSpec& sp = specs_[next_];
  ZDL_CHECK(name == sp.name, "SafetensorsStreamWriter('", path_, "'): append('", name, "') but the next declared tensor is '",
            sp.name, "' (tensors must come in the declared order)");
  ZDL_CHECK(t.defined() && t.dtype() == sp.dtype && t.shape() == sp.shape, "SafetensorsStreamWriter('", path_,
            "'): tensor '", name, "' was declared ", dtype_name(sp.dtype), " ", shape_str(sp.shape), ", got ",
            t.defined() ? dtype_name(t.dtype()) : "undefined", " ", t.defined() ? shape_str(t.shape()) : "");
  if (t.nbytes() > 0) {
    Tensor c = t.device().is_cpu() ? t : t.to(Device::cpu());
    if (!c.is_contiguous()) c = c.contiguous_copy();
    out_->write(c.raw_data(), c.nbytes());
  }
  ++next_;
}

void SafetensorsStreamWriter::commit() {
  ZDL_CHECK(next_ == specs_.size(), "SafetensorsStreamWriter('", path_, "'): commit() with ", specs_.size() - next_,
            " declared tensor(s) not written, starting with '", next_name(), "'");
  out_->commit();
}

}  // namespace zdl::io

#include "dist/checkpoint/sharded_checkpoint.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/hash.h"
#include "autograd/ops.h"
#include "io/checkpoint_dir.h"
#include "io/file.h"
#include "io/gpt2_format.h"
#include "io/json_fields.h"
#include "io/safetensors.h"

namespace zdl::dist {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

constexpr const char* kFormat = "zdl-sharded-checkpoint";
constexpr const char* kLayoutFile = "layout.json";
constexpr uint64_t kMaxLayoutBytes = 256ull << 20;
// What each owned range stores, in this order.
constexpr const char* kStates[3] = {"master", "exp_avg", "exp_avg_sq"};

std::string rank_file_name(int r, int n) {
  return "rank-" + std::to_string(r) + "-of-" + std::to_string(n) + ".safetensors";
}

// The entries of a checkpoint directory a save owns: its layout and the rank files of any world
// size ("rank-R-of-N.safetensors"); the rest is carried into the new checkpoint ([Note: foreign
// files] in io/checkpoint_dir.cpp).
bool owned_by_sharded_checkpoint(const std::string& name) {
  if (name == kLayoutFile) return true;
  int r = -1, n = -1, end = 0;
  return std::sscanf(name.c_str(), "rank-%d-of-%d.safetensors%n", &r, &n, &end) == 2 && r >= 0 && n > 0 &&
         static_cast<size_t>(end) == name.size() && name == rank_file_name(r, n);
}

std::string entry_name(const std::string& param, const char* state, int64_t begin) {
  return param + ":" + state + "@" + std::to_string(begin);
}





// Flat elements [at, at + n) of a contiguous 1-D tensor, as a view.
Tensor flat_range(const Tensor& t, int64_t at, int64_t n) {
  return Tensor::from_storage(t.storage(), {n}, {1}, t.offset() + at, t.dtype());
}

// The master-sized tensors of unit i, in kStates order: the master of its OptimizerShard and
// the optimizer's moments.
std::array<Tensor, 3> unit_states(const OptimizerShard& shard, const ZeroAdamW& opt, size_t i) {
  return {shard.master, opt.exp_avg(i), opt.exp_avg_sq(i)};
}

// ---- collective failure handling ----

// Runs f on this rank, then agrees with every rank on whether all succeeded (one all-gather,
// which is also the barrier between phases). A failure anywhere throws the same
// CollectiveError on every rank: the first failing rank's message under its "[rank r/N]" (sent
// to the others), so no rank is left waiting in a later collective and one rank can print it.
template <class F>
void on_every_rank(Communicator& comm, const std::string& what, F&& f) {
  bool failed = false;
  std::string msg;
  try {
    f();
  } catch (const std::exception& e) {  // zdl::Error, std::filesystem errors, JSON errors
    failed = true;
    msg = e.what();
  }
  const std::vector<int64_t> failures = comm.all_gather_i64(failed ? 1 : 0);
  const auto first = std::find(failures.begin(), failures.end(), 1);
  if (first == failures.end()) return;
  const int r = static_cast<int>(first - failures.begin());
  const std::string theirs = comm.broadcast_string(msg, r);
  throw CollectiveError(detail::str("[rank ", r, "/", comm.size(), "] ", what, ": ", theirs));
}

// ---- layout.json ----

struct LayoutParam {
  std::string name;
  Shape shape;
  std::string unit;
  int64_t offset = 0;
};

struct LayoutEntry {
  std::string param;
  int64_t begin = 0, end = 0;
};

struct LayoutFile {
  std::string name;
  uint64_t bytes = 0;
  std::string fnv1a64;
  std::vector<LayoutEntry> entries;
};

// Where a parameter's elements [begin, end) are stored.
struct Piece {
  size_t file;
  int64_t begin, end;
};

struct Layout {
  std::string dir;  // resolved
  int world_size = 0;
  int stage = 0;
  DType master_dtype = DType::F32;
  int64_t optimizer_step = 0;
  io::TrainState state;
  std::vector<LayoutParam> params;        // in unit order, then offset order
  std::vector<std::string> unit_order;    // unit names as saved
  std::vector<LayoutFile> files;          // index = rank
  std::map<std::string, std::vector<Piece>> pieces;  // param -> sorted, tiling [0, numel)
};

}  // namespace

// [Note: train-state checksum] The rank files carry checksums; the train state lives in
// layout.json, where a plausible edit (step, optimizer_step, data_position, seed) would shift the
// trajectory silently. Its fields are hashed in a canonical form (lengths before strings, so no
// two states share one) and the hash is saved beside them.
std::string train_state_checksum(const io::TrainState& st, int64_t optimizer_step) {
  std::string c = detail::str("step=", st.step, ";data_position=", st.data_position, ";optimizer_step=",
                              optimizer_step, ";counters=");
  for (auto& [k, v] : st.counters) c += detail::str(k.size(), ":", k, "=", v, ";");
  c += "metadata=";
  for (auto& [k, v] : st.metadata) c += detail::str(k.size(), ":", k, "=", v.size(), ":", v, ";");
  return io::hex64(fnv1a64(c));
}

namespace {

ordered_json train_state_json(const io::TrainState& st) {
  return {{"step", st.step}, {"data_position", st.data_position}, {"counters", st.counters}, {"metadata", st.metadata}};
}

Layout read_layout(const std::string& dir) {
  Layout L;
  L.dir = io::resolve_checkpoint_dir(dir, kLayoutFile, "sharded checkpoint");
  const std::string path = (fs::path(L.dir) / kLayoutFile).string();
  ZDL_CHECK(fs::exists(path), "sharded checkpoint '", dir, "' has no ", kLayoutFile, " (not a sharded zdl checkpoint?)");
  io::InputFile f(path);
  ZDL_CHECK(f.size() <= kMaxLayoutBytes, "'", path, "' is ", f.size(), " bytes, more than the ", kMaxLayoutBytes,
            " allowed (corrupted?)");
  std::string text(f.size(), '\0');
  f.read_exact(0, text.data(), text.size(), "the layout");
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  ZDL_CHECK(!j.is_discarded() && j.is_object(), "'", path, "' is not a JSON object (corrupted or truncated?)");
  // A comparison, not j.value(): value() throws json's type_error when the field is not a string.
  ZDL_CHECK(j.contains("format") && j["format"] == kFormat, "'", path, "' is not a sharded zdl checkpoint layout (format=",
            j.contains("format") ? io::json_shown(j["format"]) : "missing", ")");
  ZDL_CHECK(j.contains("format_version") && j["format_version"].is_number_integer(), "'", path,
            "' has no integer format_version");
  const int64_t v = io::json_integer<int64_t>(j["format_version"], "format_version");
  ZDL_CHECK(v <= kShardedCheckpointFormatVersion, "sharded checkpoint '", dir, "' has format_version ", v,
            ", newer than the version ", kShardedCheckpointFormatVersion,
            " this build reads: load it with a newer zdl");
  ZDL_CHECK(v >= 1, "'", path, "' has invalid format_version ", v);
  try {
    L.world_size = io::json_integer<int>(j.at("world_size"), "world_size");
    L.stage = io::json_integer<int>(j.at("stage"), "stage");
    L.master_dtype = io::dtype_from_safetensors_name(j.at("master_dtype").get<std::string>());
    L.optimizer_step = io::json_integer<int64_t>(j.at("optimizer_step"), "optimizer_step");
    L.state.step = io::json_integer<int64_t>(j.at("step"), "step");
    L.state.data_position = io::json_integer<int64_t>(j.at("data_position"), "data_position");
    L.state.counters = io::json_integer_map<uint64_t>(j.at("counters"), "counters");
    L.state.metadata = j.at("metadata").get<std::map<std::string, std::string>>();
    if (v >= 2) {
      const std::string saved = j.at("train_state_fnv1a64").get<std::string>();
      ZDL_CHECK(saved == train_state_checksum(L.state, L.optimizer_step), "'", path,
                "': the train state (step, data_position, optimizer_step, counters, metadata) does not match its "
                "checksum: the layout was edited or corrupted; restore it from the run that wrote it");
    }
    for (const json& u : j.at("units")) L.unit_order.push_back(u.at("name").get<std::string>());
    for (const json& p : j.at("parameters"))
      L.params.push_back({p.at("name").get<std::string>(), io::json_integer_array<int64_t>(p.at("shape"), "shape"), p.at("unit").get<std::string>(),
                          io::json_integer<int64_t>(p.at("offset"), "offset")});
    for (const json& fj : j.at("files")) {
      LayoutFile lf;
      lf.name = fj.at("name").get<std::string>();
      lf.bytes = io::json_integer<uint64_t>(fj.at("bytes"), "bytes");
      lf.fnv1a64 = fj.at("fnv1a64").get<std::string>();
      for (const json& e : fj.at("entries"))
        lf.entries.push_back({e.at("param").get<std::string>(), io::json_integer<int64_t>(e.at("begin"), "begin"),
                                 io::json_integer<int64_t>(e.at("end"), "end")});
      L.files.push_back(std::move(lf));
    }
  } catch (const json::exception& e) {
    ZDL_CHECK(false, "'", path, "' has a missing or mistyped field: ", e.what());
  }
  ZDL_CHECK(L.state.step >= 0 && L.state.data_position >= 0 && L.optimizer_step >= 0, "'", path,
            "': impossible train state: step ", L.state.step, ", optimizer_step ", L.optimizer_step, ", data_position ",
            L.state.data_position, " (each must be >= 0)");
  ZDL_CHECK(L.world_size >= 1 && static_cast<int>(L.files.size()) == L.world_size, "'", path, "': world_size ",
            L.world_size, " but ", L.files.size(), " rank files listed");
  ZDL_CHECK(L.master_dtype == DType::F32 || L.master_dtype == DType::F64, "'", path, "': master_dtype ",
            dtype_name(L.master_dtype), " is not f32 or f64");
  for (auto& f : L.files)
    ZDL_CHECK(!f.name.empty() && f.name.find('/') == std::string::npos && f.name != "." && f.name != "..", "'", path,
              "' lists a rank file named '", f.name, "' (names must be plain file names in the checkpoint directory)");
  return L;
}

// Checks that the rank files' entries tile every parameter exactly once, and indexes them.
void index_pieces(Layout& L) {
  const std::string where = (fs::path(L.dir) / kLayoutFile).string();
  std::map<std::string, int64_t> numel;
  for (auto& p : L.params) {
    // The file is untrusted: a hostile shape must not overflow numel (undefined behaviour).
    int64_t n = 1;
    for (int64_t d : p.shape)
      ZDL_CHECK(d >= 0 && !__builtin_mul_overflow(n, d, &n), "'", where, "': parameter '", p.name, "' has shape ",
                shape_str(p.shape));
    ZDL_CHECK(numel.emplace(p.name, n).second, "'", where, "' lists parameter '", p.name, "' twice");
  }
  for (size_t fi = 0; fi < L.files.size(); ++fi)
    for (auto& e : L.files[fi].entries) {
      ZDL_CHECK(numel.count(e.param), "'", where, "': ", L.files[fi].name, " holds '", e.param,
                "', which is not among the parameters");
      L.pieces[e.param].push_back({fi, e.begin, e.end});
    }
  for (auto& [name, n] : numel) {
    auto& ps = L.pieces[name];
    std::sort(ps.begin(), ps.end(), [](const Piece& a, const Piece& b) { return a.begin < b.begin; });
    int64_t covered = 0;
    for (auto& p : ps) {
      ZDL_CHECK(p.begin == covered && p.end > p.begin, "'", where, "' is inconsistent: elements of parameter '", name,
                "' from ", covered, " on are not stored exactly once (next piece [", p.begin, ", ", p.end, ") in ",
                L.files[p.file].name, ")");
      covered = p.end;
    }
    ZDL_CHECK(covered == n, "'", where, "' is inconsistent: parameter '", name, "' has ", n,
              " elements but the rank files hold [0, ", covered, ")");
  }
}

// Every name and shape of the wrapped model against the layout, all differences in one error.
void check_same_model(const Layout& L, ZeroPartitioner& zero, const std::string& dir) {
  std::map<std::string, Shape> saved;
  for (auto& p : L.params) saved[p.name] = p.shape;
  std::string problems;
  auto problem = [&](const std::string& p) { problems += (problems.empty() ? "" : "; ") + p; };
  for (const ParamUnit* u : zero.units())
    for (const ParamSlot& s : u->slots()) {
      auto it = saved.find(s.name);
      if (it == saved.end()) {
        problem("missing: " + s.name);
        continue;
      }
      if (it->second != s.param.shape())
        problem(s.name + " (model has " + shape_str(s.param.shape()) + ", checkpoint has " + shape_str(it->second) + ")");
      saved.erase(it);
    }
  for (auto& [n, shape] : saved) problem("unexpected: " + n);
  ZDL_CHECK(problems.empty(), "sharded checkpoint '", dir,
            "' is a checkpoint from a different model (parameter names/shapes differ): ", problems);
}

// ---- reading rank files ----

// Opens rank file `fi` after checking its size and checksum against the layout, and that it
// holds every entry the layout lists for it with the right dtype and shape.
std::unique_ptr<io::SafetensorsReader> open_verified(const Layout& L, size_t fi) {
  const LayoutFile& lf = L.files[fi];
  const std::string path = (fs::path(L.dir) / lf.name).string();
  ZDL_CHECK(fs::exists(path), "rank file '", path, "' is missing");
  const uint64_t have = fs::file_size(path);
  ZDL_CHECK(have == lf.bytes, "rank file '", path, "' is ", have, " bytes but ", lf.bytes, " were written (",
            have < lf.bytes ? "truncated" : "overwritten", ")");
  const std::string sum = io::hex64(io::fnv1a64_file(path));
  ZDL_CHECK(sum == lf.fnv1a64, "rank file '", path, "' is corrupted (FNV-1a 64 checksum ", sum, " != recorded ",
            lf.fnv1a64, ")");
  auto r = std::make_unique<io::SafetensorsReader>(path);
  for (auto& e : lf.entries)
    for (const char* st : kStates) {
      const io::SafetensorsEntry& se = r->entry(entry_name(e.param, st, e.begin));
      ZDL_CHECK(se.dtype == L.master_dtype && se.shape == Shape{e.end - e.begin}, "rank file '", path, "': '",
                se.name, "' is ", io::safetensors_dtype_name(se.dtype), " ", shape_str(se.shape),
                " but layout.json says ", io::safetensors_dtype_name(L.master_dtype), " [", e.end - e.begin, "]");
    }
  ZDL_CHECK(r->header().entries.size() == 3 * lf.entries.size(), "rank file '", path, "' holds ",
            r->header().entries.size(), " tensors, layout.json lists ", 3 * lf.entries.size());
  return r;
}

// Rank files opened on first use, each verified once.
class RankFiles {
 public:
  explicit RankFiles(const Layout& L) : L_(L), open_(L.files.size()) {}
  const io::SafetensorsReader& get(size_t fi) {
    if (!open_[fi]) open_[fi] = open_verified(L_, fi);
    return *open_[fi];
  }
  // Flat elements [a, b) of `state` of parameter `param` into dst ([b - a] contiguous).
  void read(const std::string& param, int state, int64_t a, int64_t b, const Tensor& dst) {
    for (const Piece& p : L_.pieces.at(param)) {
      const int64_t lo = std::max(a, p.begin), hi = std::min(b, p.end);
      if (lo >= hi) continue;
      get(p.file).read_elements(entry_name(param, kStates[state], p.begin), lo - p.begin, flat_range(dst, lo - a, hi - lo));
    }
  }
  // Verifies (without reading values) every file holding a part of [a, b) of `param`.
  void verify(const std::string& param, int64_t a, int64_t b) {
    for (const Piece& p : L_.pieces.at(param))
      if (std::max(a, p.begin) < std::min(b, p.end)) get(p.file);
  }

 private:
  const Layout& L_;
  std::vector<std::unique_ptr<io::SafetensorsReader>> open_;
};

// ---- GPT-2 consolidation (the format's side: io::write_gpt2_consolidated) ----

// The output must not land inside the checkpoint it is read from (or its staging and backup
// siblings): writing over a shard or layout.json would destroy the input while reading it.
void check_output_outside(const std::string& dir, const std::string& out_path) {
  std::error_code ec;
  const fs::path out = fs::weakly_canonical(out_path, ec);
  if (ec) return;  // the write reports an unusable path itself
  for (const char* suffix : {"", ".saving", ".old"}) {
    const fs::path d = fs::weakly_canonical(*suffix ? io::checkpoint_sibling(dir, suffix) : dir, ec);
    if (ec) continue;
    const bool inside = std::mismatch(d.begin(), d.end(), out.begin(), out.end()).first == d.end();
    ZDL_CHECK(!inside, "consolidate_sharded('", dir, "'): the output '", out_path,
              "' is inside the checkpoint directory it reads ('", d.string(),
              "'); writing there would destroy the input: choose a path outside it");
  }
}

void consolidate_impl(const std::string& dir, const std::string& out_path) {
  check_output_outside(dir, out_path);
  Layout L = read_layout(dir);
  index_pieces(L);
  RankFiles files(L);
  for (size_t fi = 0; fi < L.files.size(); ++fi) files.get(fi);  // every file checked before writing
  io::SavedGpt saved;
  for (auto& p : L.params) saved.params.emplace_back(p.name, p.shape);
  auto it = L.state.metadata.find("config");
  if (it != L.state.metadata.end()) saved.config_json = it->second;
  saved.metadata = {{"source", kFormat}, {"step", std::to_string(L.state.step)}};
  saved.read = [&](const std::string& name, const Tensor& dst) {
    files.read(name, /*state=master*/ 0, 0, dst.numel(), flat_range(dst, 0, dst.numel()));
  };
  io::write_gpt2_consolidated(saved, out_path, "consolidate_sharded('" + dir + "')");
}

// ---- save / load ----

void save_files_and_swap(const std::string& dir, const std::string& saving, const std::vector<std::string>& names,
                         ZeroPartitioner& zero,
                         const ZeroAdamW& opt, const io::TrainState& state);

void save_impl(const std::string& dir, ZeroPartitioner& zero, const ZeroAdamW& opt, const io::TrainState& state) {
  Communicator& comm = zero.comm();
  const int N = zero.shard_group().size(), rank = comm.rank();
  const std::string what = "save_sharded('" + dir + "')";
  const std::string saving = io::checkpoint_sibling(dir, ".saving");
  std::vector<std::string> names;
  for (int r = 0; r < N; ++r) names.push_back(rank_file_name(r, N));

  // 1. Rank 0 makes a fresh staging directory (removing debris of an interrupted save), once
  // `dir` is known to be a place a save may replace (not a file, not the working directory or
  // one above it, not a directory that is not a checkpoint: io::save_checkpoint's check).
  on_every_rank(comm, what, [&] {
    if (rank != 0) return;
    io::check_checkpoint_destination(dir, kLayoutFile);
    io::prepare_staging(dir);
  });

  try {
    save_files_and_swap(dir, saving, names, zero, opt, state);
  } catch (...) {
    // A failed save (a full disk, a write error on any rank) leaves no debris: on_every_rank has
    // agreed on the failure, so no rank still writes there, and rank 0 removes the staging
    // directory. `dir` keeps the previous checkpoint (or, past the swap, the new one).
    if (rank == 0) {
      std::error_code ec;
      fs::remove_all(saving, ec);
    }
    throw;
  }
}

void save_files_and_swap(const std::string& dir, const std::string& saving, const std::vector<std::string>& names,
                         ZeroPartitioner& zero,
                         const ZeroAdamW& opt, const io::TrainState& state) {
  Communicator& comm = zero.comm();
  // One file per shard: under hybrid sharding the first group's ranks (world ranks 0..K-1, shard r
  // on rank r) write them, and the other groups, holding the same shards, write nothing.
  const int N = zero.shard_group().size(), rank = comm.rank();
  const bool writes = rank < N;
  const std::string what = "save_sharded('" + dir + "')";
  // 2. Every rank writes its blocks (views of its masters and moments, no copies; states on a GPU
  // are copied to the host tensor by tensor as the file is written).
  uint64_t bytes = 0, sum = 0;
  // Streamed unit by unit: an offloaded unit's states are in memory only while it is written.
  on_every_rank(comm, what, [&] {
    if (!writes) return;
    NoGradGuard ng;
    const std::vector<OptimizerShard> shards = zero.optimizer_shards();
    const std::vector<const ParamUnit*> units = zero.units();
    std::vector<io::SafetensorsTensorSpec> specs;  // one dtype: the declared order is aligned
    for (size_t i = 0; i < shards.size(); ++i)
      for (const Segment& g : units[i]->shard_segments(rank))
        for (int k = 0; k < 3; ++k)
          specs.push_back({entry_name(g.slot->name, kStates[k], g.param_begin()), shards[i].master.dtype(), {g.numel()}});
    const std::string path = (fs::path(saving) / names[rank]).string();
    io::SafetensorsStreamWriter w(path, std::move(specs),
                                  {{"format", kFormat}, {"rank", std::to_string(rank)}, {"world_size", std::to_string(N)}});
    for (size_t i = 0; i < shards.size(); ++i) {
      Resident offloaded(opt.offloaded_states(i));
      offloaded.wait();
      const auto states = unit_states(shards[i], opt, i);
      for (const Segment& g : units[i]->shard_segments(rank))
        for (int k = 0; k < 3; ++k)
          w.append(entry_name(g.slot->name, kStates[k], g.param_begin()),
                   flat_range(states[k], g.begin - shards[i].begin, g.numel()));
    }
    w.commit();
    // Checksummed from the disk: it covers what a later load will read.
    bytes = fs::file_size(path);
    sum = io::fnv1a64_file(path);
  });
  const std::vector<int64_t> all_bytes = comm.all_gather_i64(static_cast<int64_t>(bytes));
  const std::vector<int64_t> all_sums = comm.all_gather_i64(std::bit_cast<int64_t>(sum));

  // 3. Rank 0 writes the layout and swaps the staging directory into place.
  on_every_rank(comm, what, [&] {
    if (rank != 0) return;
    ordered_json j = ordered_json::object();
    j["format"] = kFormat;
    j["format_version"] = kShardedCheckpointFormatVersion;
    j["world_size"] = N;
    j["stage"] = static_cast<int>(zero.stage());
    j["stage_name"] = stage_name(zero.stage());
    j["compute_dtype"] = dtype_name(zero.options().compute_dtype);
    const std::vector<OptimizerShard> shards = zero.optimizer_shards();
    j["master_dtype"] = io::safetensors_dtype_name(shards.empty() ? DType::F32 : shards[0].master.dtype());
    j["optimizer_step"] = opt.step_count();
    const ordered_json st = train_state_json(state);  // a named object: items() refers into it
    for (auto& [k, v] : st.items()) j[k] = v;
    j["train_state_fnv1a64"] = train_state_checksum(state, opt.step_count());
    ordered_json units = ordered_json::array(), params = ordered_json::array(), files = ordered_json::array();
    for (const ParamUnit* u : zero.units()) {
      units.push_back(
          {{"name", u->name()}, {"numel", u->numel()}, {"padded", u->padded()}, {"shard_size", u->shard_size()}});
      for (const ParamSlot& s : u->slots())
        params.push_back({{"name", s.name}, {"shape", s.param.shape()}, {"unit", u->name()}, {"offset", s.offset}});
    }
    for (int r = 0; r < N; ++r) {
      ordered_json entries = ordered_json::array();
      for (const ParamUnit* u : zero.units())
        for (const Segment& g : u->shard_segments(r))
          entries.push_back({{"param", g.slot->name}, {"begin", g.param_begin()}, {"end", g.param_end()}});
      files.push_back({{"name", names[r]},
                       {"rank", r},
                       {"bytes", static_cast<uint64_t>(all_bytes[r])},
                       {"fnv1a64", io::hex64(std::bit_cast<uint64_t>(all_sums[r]))},
                       {"entries", entries}});
    }
    j["units"] = units;
    j["parameters"] = params;
    j["files"] = files;
    const std::string text = j.dump(1) + "\n";
    io::AtomicFileWriter w((fs::path(saving) / kLayoutFile).string());
    w.write(text.data(), text.size());
    w.commit();  // also fsyncs `saving`

    io::swap_into_place(dir, owned_by_sharded_checkpoint);
  });
}

io::TrainState load_impl(const std::string& dir, ZeroPartitioner& zero, ZeroAdamW& opt) {
  Communicator& comm = zero.comm();
  const std::string what = "load_sharded('" + dir + "')";
  Layout L;
  std::unique_ptr<RankFiles> files;

  // 1. Everything that can be checked before a value is read: format, model, this rank's files.
  on_every_rank(comm, what, [&] {
    L = read_layout(dir);
    check_same_model(L, zero, dir);
    index_pieces(L);
    files = std::make_unique<RankFiles>(L);
    for (const ParamUnit* u : zero.units())
      ZDL_CHECK(zero.stage() != ZeroStage::Three || u->param_state() == ParamState::Sharded, "unit ", u->name(),
                " is gathered: load outside forward/backward and outside GatheredParameters");
    for (const OptimizerShard& shard : zero.optimizer_shards())
      for (const Segment& g : shard.segments) files->verify(g.slot->name, g.param_begin(), g.param_end());
  });
  // 2. Fill this rank's masters and moments (padding stays zero). Files are read on the host:
  // states on a GPU are filled through host copies, one unit at a time.
  on_every_rank(comm, what, [&] {
    NoGradGuard ng;
    const std::vector<OptimizerShard> shards = zero.optimizer_shards();
    for (size_t i = 0; i < shards.size(); ++i) {
      Resident offloaded({}, {}, opt.offloaded_states(i));  // filled whole below, written back after
      offloaded.wait();
      const auto states = unit_states(shards[i], opt, i);
      auto filled = states;
      if (!states[0].device().is_cpu()) {
        MemoryScope ms(MemoryCategory::Workspace);
        for (int k = 0; k < 3; ++k) filled[k] = Tensor::empty(states[k].shape(), states[k].dtype());
      }
      for (const Tensor& t : filled) t.zero_();
      for (const Segment& g : shards[i].segments)
        for (int k = 0; k < 3; ++k)
          files->read(g.slot->name, k, g.param_begin(), g.param_end(),
                      flat_range(filled[k], g.begin - shards[i].begin, g.numel()));
      for (int k = 0; k < 3; ++k)
        if (!filled[k].same(states[k])) states[k].copy_(filled[k]);
      // Offload: the previous unit's writes ran while this one was filled; finish them, so at most
      // two units' states are in memory (as in a step), not all of them until the first step.
      if (i > 0) settle(opt.offloaded_states(i - 1));
    }
    if (!shards.empty()) settle(opt.offloaded_states(shards.size() - 1));
  });
  opt.set_step_count(L.optimizer_step);
  zero.set_step(L.state.step);
  zero.refresh_params();
  return L.state;
}

}  // namespace

void save_sharded(const std::string& dir, ZeroPartitioner& zero, const ZeroAdamW& opt, const io::TrainState& state) {
  save_impl(dir, zero, opt, state);
}

io::TrainState load_sharded(const std::string& dir, ZeroPartitioner& zero, ZeroAdamW& opt) {
  return load_impl(dir, zero, opt);
}

io::TrainState read_sharded_train_state(const std::string& dir) {
  return io::with_fs_errors(dir, "read_sharded_train_state", [&] { return read_layout(dir).state; });
}

void consolidate_sharded(const std::string& dir, const std::string& out_path) {
  io::with_fs_errors(dir, "consolidate_sharded", [&] { consolidate_impl(dir, out_path); });
}

}  // namespace zdl::dist

#include "examples/train_gpt/run_settings.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <type_traits>
#include <variant>

#include "core/check.h"
#include "io/program_main.h"

namespace zdl::train_gpt {

namespace {

using json = nlohmann::json;
using Field = std::variant<int64_t Args::*, double Args::*, std::string Args::*>;

// Flag, its member. The seed and the model's shape are checked against the checkpoint elsewhere;
// the layout (ranks, stage, sharding, quantized collectives) may change on resume, and
// --tokenizer only decodes samples.
const std::vector<std::pair<const char*, Field>>& fields() {
  static const std::vector<std::pair<const char*, Field>> all = {
      {"--data", &Args::data},
      {"--dtype", &Args::dtype},
      {"--steps", &Args::steps},
      {"--batch", &Args::batch},
      {"--seq", &Args::seq},
      {"--grad-accum", &Args::grad_accum},
      {"--lr", &Args::lr},
      {"--min-lr-ratio", &Args::min_lr_ratio},
      {"--warmup", &Args::warmup},
      {"--weight-decay", &Args::weight_decay},
      {"--grad-clip", &Args::grad_clip},
      {"--val-fraction", &Args::val_fraction},
      {"--reduction", &Args::reduction},
  };
  return all;
}

// The JSON key of a flag: its name without the dashes.
std::string key(const char* flag) { return std::string(flag + 2); }

// Paths are saved absolute, so a run resumed from another directory finds them; how a path is
// spelled is no change of trajectory (the data's bytes are checked against the checkpoint's).
bool is_path(const char* flag) { return std::string(flag) == "--data"; }
std::string absolute(const std::string& path) {
  return path.empty() ? path : std::filesystem::absolute(path).lexically_normal().string();
}

}  // namespace

std::string run_settings_json(const Args& a) {
  json j = json::object();
  for (const auto& [flag, field] : fields())
    std::visit(
        [&, flag = flag](auto member) {
          if constexpr (std::is_same_v<std::remove_cvref_t<decltype(a.*member)>, std::string>)
            j[key(flag)] = is_path(flag) ? absolute(a.*member) : a.*member;
          else
            j[key(flag)] = a.*member;
        },
        field);
  return j.dump();
}

std::vector<std::string> adopt_run_settings(Args& a, const CLI::App& app, const std::string& saved) {
  json j;
  try {
    j = json::parse(saved);
  } catch (const json::exception& e) {
    throw io::UsageError(std::string("--resume: the checkpoint's run settings do not parse: ") + e.what());
  }
  std::vector<std::string> changed;
  for (const auto& [flag, field] : fields()) {
    if (!j.contains(key(flag))) continue;
    std::visit(
        [&, flag = flag](auto member) {
          using T = std::remove_reference_t<decltype(a.*member)>;
          T value;
          try {
            value = j.at(key(flag)).template get<T>();
          } catch (const json::exception& e) {
            throw io::UsageError(detail::str("--resume: the checkpoint's ", flag, " does not parse: ", e.what()));
          }
          if (!given(app, flag)) a.*member = value;
          else if (a.*member != value && !is_path(flag)) changed.push_back(detail::str(flag, " ", a.*member, " (the checkpoint's: ", value, ")"));
        },
        field);
  }
  return changed;
}

}  // namespace zdl::train_gpt

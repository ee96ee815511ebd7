#include "io/program_flags.h"

#include <algorithm>
#include <cerrno>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <utility>

#include "core/hash.h"
#include "io/environment.h"
#include "io/program_main.h"

namespace zdl::io {

std::optional<int> check_invocation(const char* name, CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: %s (see --help)\n", name, short_parse_message(e.what()).c_str());
    return 2;
  }
  if (std::string bad = malformed_number(app); !bad.empty()) {
    std::fprintf(stderr, "%s: %s (see --help)\n", name, bad.c_str());
    return 2;
  }
  if (const std::string problem = environment_problem(); !problem.empty()) {
    std::fprintf(stderr, "%s: %s\n", name, problem.c_str());
    return 2;
  }
  return std::nullopt;
}

std::string malformed_number(const CLI::App& app) {
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->count() == 0 || opt->results().empty()) continue;
    const std::string type = opt->get_type_name(), v = opt->results().back();
    const bool is_float = type.find("FLOAT") != std::string::npos, is_int = type.find("INT") != std::string::npos;
    if (!is_float && !is_int) continue;
    const char* s = v.c_str();
    char* end = nullptr;
    errno = 0;
    if (is_float) {
      const double d = std::strtod(s, &end);
      if (end != s && !std::isfinite(d)) return opt->get_name() + ": '" + v + "' is not a finite number";
    } else if (type.rfind("UINT", 0) == 0 && v.find('-') != std::string::npos) {
      return opt->get_name() + ": '" + v + "' is negative";
    } else {
      if (type.rfind("UINT", 0) == 0) std::strtoull(s, &end, 0);
      else std::strtoll(s, &end, 0);
      if (end != s && errno == ERANGE) return opt->get_name() + ": '" + v + "' does not fit in 64 bits";
    }
  }
  return "";
}

std::optional<int64_t> parse_byte_size(const std::string& text, std::string* why) {
  static const std::regex form(R"(\s*([0-9]+(\.[0-9]*)?|\.[0-9]+)\s*(([kKmMgGtT])([iI]?[bB])?|[bB])?\s*)");
  std::smatch m;
  const auto fail = [&](const char* reason) -> std::optional<int64_t> {
    if (why) *why = "'" + text + "' " + reason;
    return std::nullopt;
  };
  if (!std::regex_match(text, m, form))
    return fail("is not a size in bytes (a number, optionally with a unit: 4096, 512K, 2G, 1.5GiB)");
  double bytes = std::strtod(m[1].str().c_str(), nullptr);
  if (m[4].matched) {
    const std::string units = "kmgt";
    const auto power = units.find(static_cast<char>(std::tolower(static_cast<unsigned char>(m[4].str()[0])))) + 1;
    bytes *= std::pow(1024.0, static_cast<double>(power));
  }
  if (!(bytes < 9.0e18)) return fail("is too large a size in bytes");
  return static_cast<int64_t>(bytes);
}

CLI::Validator ByteSize() {
  return CLI::Validator(
      [](std::string& value) {
        std::string why;
        const std::optional<int64_t> bytes = parse_byte_size(value, &why);
        if (!bytes) return why;
        value = std::to_string(*bytes);
        return std::string();
      },
      "SIZE (bytes, or 512K, 2G, 1.5GiB)");
}

std::string short_parse_message(std::string m) {
  static const std::regex unbounded(R"(Value (\S+) not in range 0\.0+ to [0-9]{30,}(\.[0-9]+)?)");
  std::smatch hit;
  if (!std::regex_search(m, hit, unbounded)) return m;
  // CLI11 range-checks a value it could not read as a number too ("1K", "abc"): strtod reads a
  // prefix of it, so the whole of it must be read for the range to be what is wrong.
  const std::string value = hit[1].str();
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  const char* why = end == value.c_str() || *end != '\0' ? " is not a number"
                    : !std::isfinite(v)                   ? " is not a finite number"
                    : v == 0.0                            ? " must be positive"
                                                          : " must not be negative";
  return hit.prefix().str() + hit[1].str() + why + hit.suffix().str();
}

void agree_on_flags(dist::Communicator& comm, const CLI::App& app, const std::vector<std::string>& path_flags) {
  if (comm.size() == 1) return;
  std::vector<std::pair<std::string, std::string>> flags;  // (name, value as the rank sees it)
  for (const CLI::Option* opt : app.get_options()) {
    const std::string name = opt->get_name();
    if (name == "--help") continue;
    // The value in force: a flag given twice counts once, with its last value (as CLI11 does).
    std::string value = opt->results().empty() ? "" : opt->results().back();
    if (std::find(path_flags.begin(), path_flags.end(), name) != path_flags.end())
      value = opt->count() == 0 ? "(not given)" : "(a path)";
    flags.emplace_back(name, opt->count() == 0 && value.empty() ? "(default)" : value);
  }
  uint64_t all = kFnv1aOffset;
  for (auto& [n, v] : flags) all = fnv1a64(n + "=" + v + ";", all);
  std::vector<int64_t> hashes = comm.all_gather_i64(static_cast<int64_t>(all));
  if (std::all_of(hashes.begin(), hashes.end(), [&](int64_t h) { return h == hashes[0]; })) return;
  for (auto& [name, value] : flags) {
    hashes = comm.all_gather_i64(static_cast<int64_t>(fnv1a64(value)));
    int other = 0;
    for (int r = 1; r < comm.size() && other == 0; ++r)
      if (hashes[static_cast<size_t>(r)] != hashes[0]) other = r;
    if (other == 0) continue;
    const std::string theirs = comm.broadcast_string(value, other);
    throw UsageError(detail::str("ranks disagree on ", name, ": rank 0 has ", value, ", rank ", other, " has ", theirs,
                                 "; every rank must be started with the same flags"));
  }
  throw UsageError("ranks disagree on their flags (in their order); start every rank with the same command line");
}

}  // namespace zdl::io

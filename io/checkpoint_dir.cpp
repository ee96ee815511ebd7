#include "io/checkpoint_dir.h"

#include <cstdio>

namespace zdl::io {

namespace fs = std::filesystem;

std::string checkpoint_sibling(const std::string& dir, const char* suffix) {
  fs::path p = fs::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();  // "ckpt/" -> "ckpt"
  std::string name(".");  // built with += : GCC 12 warns falsely (-Wrestrict) on "." + s + suffix
  name += p.filename().string();
  name += suffix;
  return (p.parent_path() / name).string();
}

std::string checkpoint_parent(const std::string& dir) {
  fs::path p = fs::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  std::string parent = p.parent_path().string();
  return parent.empty() ? "." : parent;
}

std::string resolve_checkpoint_dir(const std::string& dir, const char* marker_file, const char* kind) {
  if (fs::is_directory(dir)) return dir;
  std::string old = checkpoint_sibling(dir, ".old");
  if (fs::is_directory(old) && fs::exists(fs::path(old) / marker_file)) return old;
  ZDL_CHECK(false, kind, " '", dir, "' does not exist (no directory there)");
  return dir;
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace zdl::io

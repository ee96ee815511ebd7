#include "io/checkpoint_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "io/file.h"

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
  ZDL_CHECK(!fs::exists(dir), kind, " '", dir, "' is a file, not a checkpoint directory (--save writes one)");
  ZDL_CHECK(false, kind, " '", dir, "' does not exist (no directory there)");
  return dir;
}

namespace {

// remove_all of a directory tree this process made: directories someone made read-only are
// made writable first (unlinking a file needs write permission on its directory).
void remove_tree(const fs::path& p, std::error_code& ec) {
  fs::remove_all(p, ec);
  if (!ec) return;
  std::error_code walk;
  const auto add_owner_rights = fs::perm_options::add | fs::perm_options::nofollow;
  if (fs::symlink_status(p, walk).type() != fs::file_type::directory) return;
  fs::permissions(p, fs::perms::owner_all, add_owner_rights, walk);
  for (auto it = fs::recursive_directory_iterator(p, walk); !walk && it != fs::recursive_directory_iterator();
       it.increment(walk))
    if (it->symlink_status(walk).type() == fs::file_type::directory)  // never through a link
      fs::permissions(it->path(), fs::perms::owner_all, add_owner_rights, walk);
  ec.clear();
  fs::remove_all(p, ec);
}

void remove_tree_or_throw(const fs::path& p, const char* what) {
  std::error_code ec;
  remove_tree(p, ec);
  ZDL_CHECK(!ec, "cannot remove ", what, " '", p.string(), "': ", ec.message());
}

}  // namespace

void prepare_staging(const std::string& dir) {
  const std::string saving = checkpoint_sibling(dir, ".saving");
  fs::create_directories(checkpoint_parent(dir));
  remove_tree_or_throw(saving, "the debris of an interrupted save");
  if (fs::exists(dir)) remove_tree_or_throw(checkpoint_sibling(dir, ".old"), "the backup of an interrupted save");
  fs::create_directory(saving);
}

namespace {

// ".NAME.tmp.XXXXXX", AtomicFileWriter's temporary of NAME.
bool is_temporary_of(const std::string& name, const OwnedName& owns) {
  const size_t tmp = name.rfind(".tmp.");
  return name.size() > 1 && name[0] == '.' && tmp != std::string::npos && tmp > 1 && owns(name.substr(1, tmp - 1));
}

// `src` again at `dst`: directories made anew (with their permissions), files as hard links (a
// copy where the file system has none), symbolic links as links.
void link_tree(const fs::path& src, const fs::path& dst) {
  const fs::file_status st = fs::symlink_status(src);
  if (st.type() == fs::file_type::symlink) {
    fs::copy_symlink(src, dst);
  } else if (st.type() == fs::file_type::directory) {
    fs::create_directory(dst, src);
    for (const auto& e : fs::directory_iterator(src)) link_tree(e.path(), dst / e.path().filename());
  } else {
    std::error_code ec;
    fs::create_hard_link(src, dst, ec);
    if (ec) fs::copy_file(src, dst);
  }
}

// [Note: foreign files] A checkpoint directory may hold what no save wrote: an export into the
// same directory, a user's NOTES.txt, evaluation results. The staging directory takes them over
// as hard links made before the swap, so they never go missing: until the swap they are in the
// old directory, after it in the new one; a crash in between leaves the old directory as it was.
void carry_foreign_entries(const fs::path& from, const fs::path& to, const OwnedName& owns) {
  if (!fs::is_directory(from)) return;
  for (const auto& e : fs::directory_iterator(from)) {
    const std::string name = e.path().filename().string();
    if (!owns(name) && !is_temporary_of(name, owns)) link_tree(e.path(), to / name);
  }
}

}  // namespace

void swap_into_place(const std::string& dir, const OwnedName& owns) {
  const std::string parent = checkpoint_parent(dir), saving = checkpoint_sibling(dir, ".saving"),
                    old = checkpoint_sibling(dir, ".old");
  carry_foreign_entries(dir, saving, owns);
  // The new directory is the old one to its users: the same mode (a private 0700, a setgid
  // group directory) and, where this process may set them, the same owner and group.
  struct stat before {};
  if (::stat(dir.c_str(), &before) == 0) {
    [[maybe_unused]] const int owner = ::chown(saving.c_str(), before.st_uid, before.st_gid);
    [[maybe_unused]] const int mode = ::chmod(saving.c_str(), before.st_mode & 07777);
  }
  fsync_directory(saving);
  std::string previous;  // where the replaced checkpoint is now
  if (fs::exists(dir) && exchange_paths(saving, dir)) {
    fsync_directory(parent);
    previous = saving;
  } else {
    if (fs::exists(dir)) rename_path(dir, old);  // no RENAME_EXCHANGE: load falls back to `old` until the next line
    rename_path(saving, dir);
    fsync_directory(parent);
    previous = old;
  }
  std::error_code ec;
  remove_tree(previous, ec);
  if (ec)
    std::fprintf(stderr, "zdl: warning: saved '%s', but the checkpoint it replaced (now '%s') could not be removed: %s\n",
                 dir.c_str(), previous.c_str(), ec.message().c_str());
}

std::string directory_link_target(const std::string& dir) {
  fs::path d = fs::path(dir).lexically_normal();
  if (d.filename().empty()) d = d.parent_path();  // "ck/" names "ck"
  if (d.empty() || !fs::is_symlink(d)) return dir;
  std::error_code ec;
  const fs::path target = fs::canonical(d, ec);
  require(!ec && fs::is_directory(target), "'", dir, "' is a symbolic link to ",
          ec ? "a place that does not exist" : "something that is not a directory");
  return target.string();
}

void require_outside_working_directory(const std::string& dir) {
  std::error_code ec;
  const fs::path cwd = fs::current_path(ec);
  if (ec) return;
  fs::path target = fs::weakly_canonical(fs::absolute(dir, ec), ec);
  if (ec) return;
  if (target.filename().empty()) target = target.parent_path();  // "/a/b/" -> "/a/b"
  const fs::path here = fs::weakly_canonical(cwd, ec);
  if (ec) return;
  // target holds the working directory when its parts are the first parts of the latter's.
  const auto [t, h] = std::mismatch(target.begin(), target.end(), here.begin(), here.end());
  require(t != target.end(), "'", dir, "' is ", h == here.end() ? "the working directory" : "above the working directory",
          " ('", here.string(), "'), which a save or an export would swap out from under this run: name a ",
          "directory outside it (a subdirectory of it is fine)");
}

void check_checkpoint_destination(const std::string& dir, const char* marker_file) {
  require_outside_working_directory(dir);
  std::error_code ec;
  const fs::path p(dir);
  if (fs::exists(p, ec)) {
    require(fs::is_directory(p, ec), "'", dir, "' exists and is not a directory");
    require(fs::is_empty(p, ec) || fs::exists(p / marker_file, ec), "'", dir,
            "' is a non-empty directory that is not a zdl checkpoint (no ", marker_file,
            "); choose a new or empty directory, or a checkpoint to replace");
    const std::string why = unwritable_reason(dir);
    require(why.empty(), "the checkpoint directory '", dir, "' is not writable (", why,
            "): a save replaces its checkpoint files");
  }
  const std::string parent = checkpoint_parent(dir);
  fs::create_directories(parent, ec);
  require(!ec, "cannot create the directory '", parent, "' for '", dir, "': ", ec.message());
  check_can_write_in(parent, dir);
}

std::string unwritable_reason(const std::string& dir) {
  // AT_EACCESS: the rights this process writes with (effective ids), not access()'s real ids.
  if (::faccessat(AT_FDCWD, dir.c_str(), W_OK | X_OK, AT_EACCESS) == 0) return "";
  return std::strerror(errno);
}

void check_can_write_in(const std::string& parent, const std::string& dir, int64_t bytes) {
  std::string probe = parent + "/.zdl-save-probe.XXXXXX";
  const int fd = ::mkstemp(probe.data());
  const int err = errno;
  require(fd >= 0, "cannot write in '", parent, "' (where '", dir, "' goes): ", std::strerror(err));
  ::close(fd);
  ::unlink(probe.c_str());
  if (bytes <= 0) return;
  struct statvfs fsinfo {};
  if (::statvfs(parent.c_str(), &fsinfo) != 0) return;  // unknown: the write reports a full disk itself
  const double free_bytes = static_cast<double>(fsinfo.f_bavail) * static_cast<double>(fsinfo.f_frsize);
  constexpr double MB = 1e6;
  require(free_bytes >= static_cast<double>(bytes), "'", parent, "' (where '", dir, "' goes) has ",
          std::lround(free_bytes / MB), " MB free, and '", dir, "' needs ", std::lround(static_cast<double>(bytes) / MB),
          " MB: free some space or choose another place");
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace zdl::io

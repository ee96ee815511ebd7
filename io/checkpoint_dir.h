// How checkpoint directories live on disk, shared by the single-process checkpoint
// (io/checkpoint.h) and the sharded one (dist/checkpoint/sharded_checkpoint.h): staging and fallback
// directories are hidden siblings "<parent>/.<name><suffix>" on the same file system, so a save
// can swap a complete new directory into place atomically.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include "core/check.h"

namespace zdl::io {

// "<parent>/.<name><suffix>" for the checkpoint directory `dir` ("ckpt/" and "ckpt" alike).
std::string checkpoint_sibling(const std::string& dir, const char* suffix);
// The directory holding `dir` ("." for a bare name).
std::string checkpoint_parent(const std::string& dir);
// The directory to load: `dir`, or its ".old" sibling (holding `marker_file`) left by an
// interrupted save on a file system without RENAME_EXCHANGE. Throws naming `kind` if neither.
std::string resolve_checkpoint_dir(const std::string& dir, const char* marker_file, const char* kind);
// The save protocol, shared by both checkpoint kinds:
//   prepare_staging(dir)      "<parent>/.<name>.saving" made fresh (debris of an interrupted save
//                             removed, and the ".old" backup once `dir` itself exists again);
//   ... write the files into checkpoint_sibling(dir, ".saving"), fsync, commit the manifest ...
//   swap_into_place(dir, owns) the staging directory becomes `dir` atomically (RENAME_EXCHANGE,
//                             or a rename through ".old" that load falls back to), then the previous
//                             checkpoint is removed. What `dir` holds that the save does not own
//                             (`owns(name)` false: an export, a user's notes) is carried over first
//                             ([Note: foreign files]), and `dir`'s mode and owner are given to the
//                             new directory. A previous checkpoint that cannot be removed
//                             (made read-only) is a warning, not a failed save: the new one is in place.
// `owns` names the entries of `dir` a checkpoint of this kind writes (every file of any world size
// or version, so stale ones go); their temporaries (".NAME.tmp.XXXXXX") count as owned too.
using OwnedName = std::function<bool(const std::string& name)>;
void prepare_staging(const std::string& dir);
void swap_into_place(const std::string& dir, const OwnedName& owns);
// Throws unless a save to `dir` can succeed: `dir` is absent, an empty directory or a checkpoint
// (a save replaces its checkpoint files), its parent can be created and written, and an existing
// `dir` is writable (a save removes the files of the checkpoint it replaces). For startup checks, so a
// typo or a read-only disk fails at once, not at the first save hours later.
void check_checkpoint_destination(const std::string& dir, const char* marker_file);
// The directory `dir` names, where `dir` is a symbolic link: the directory it points to (a save or
// an export swaps the target into place, not the link over it, and locks the target); `dir`
// itself otherwise. Throws where the link points nowhere, or at something not a directory.
std::string directory_link_target(const std::string& dir);
// Throws unless `dir` lies outside the working directory's path: a save or an export swaps its
// directory whole, and swapping the working directory (or one above it: "..", "$PWD") would
// leave this process, and the shell that started it, in a deleted directory.
void require_outside_working_directory(const std::string& dir);
// "" when this process may create and remove entries in the existing directory `dir` (its
// effective ids, as a write would use them), else the reason (strerror).
std::string unwritable_reason(const std::string& dir);
// Throws unless this process can create files in the existing directory `parent` (where `dir`
// goes; a probe file is made and removed), and, for bytes > 0, unless its file system has
// `bytes` free for this process (statvfs's f_bavail). Startup checks of outputs.
void check_can_write_in(const std::string& parent, const std::string& dir, int64_t bytes = 0);
// 16 lowercase hex digits (checksums in manifests).
std::string hex64(uint64_t v);

// std::filesystem reports failures (permissions, a full disk) as filesystem_error; callers of
// io/ and dist/ catch zdl::Error, so those are rethrown as one, naming the checkpoint.
template <class F>
auto with_fs_errors(const std::string& dir, const char* what, F&& f) {
  try {
    return f();
  } catch (const std::filesystem::filesystem_error& e) {
    ZDL_CHECK(false, what, "('", dir, "'): ", e.what());
    throw;
  }
}

}  // namespace zdl::io

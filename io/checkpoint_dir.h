// How checkpoint directories live on disk, shared by the single-process checkpoint
// (io/checkpoint.h) and the sharded one (dist/sharded_checkpoint.h): staging and fallback
// directories are hidden siblings "<parent>/.<name><suffix>" on the same file system, so a save
// can swap a complete new directory into place atomically.
#pragma once
#include <cstdint>
#include <filesystem>
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

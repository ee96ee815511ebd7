// Shared by the libFuzzer targets: a per-process scratch directory the inputs are written
// into, since the code under test reads files (io/, dist/) and not memory buffers.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

namespace zdl::fuzz {

// <tmp>/zdl-fuzz-<pid>/, created on first use and removed at exit.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    namespace fs = std::filesystem;
    fs::path d = fs::temp_directory_path() / ("zdl-fuzz-" + std::to_string(::getpid()));
    fs::create_directories(d);
    static struct Cleanup {
      fs::path d;
      ~Cleanup() {
        std::error_code ec;
        fs::remove_all(d, ec);
      }
    } cleanup{d};
    return d.string();
  }();
  return dir;
}

// Writes `size` bytes to `path` (truncating), or aborts: a failure here is the harness's.
inline void write_file(const std::string& path, const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || (size && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
}

}  // namespace zdl::fuzz

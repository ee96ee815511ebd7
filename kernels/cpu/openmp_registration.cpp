// Clears a stale OpenMP registration file before the OpenMP runtime starts.
//
// LLVM's libomp registers each process in /dev/shm/__KMP_REGISTERED_LIB_<pid>_<uid>: it creates
// the file, sizes it, then writes a string naming its owner. A process killed between those
// steps leaves an empty (or all-zero) file behind. A later process that gets the same pid opens
// that file, maps it and reads it: an empty file kills it with SIGBUS on its first OpenMP call,
// an all-zero one with a fatal "duplicate OpenMP runtime" error. A file holding a string is no
// danger: libomp itself sees that its owner is gone and replaces it.
//
// Before main, nothing in this process has started libomp yet, so a file named after this
// process's pid belongs to a dead one; this removes it when it holds no string.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>

namespace {

bool holds_no_string(int fd) {
  char first = 0;
  return read(fd, &first, 1) <= 0 || first == '\0';
}

}  // namespace

// extern "C" and kept: CMakeLists.txt names it to the linker (-u) so that every program linking
// the static libzdl.a keeps this object and its constructor.
extern "C" __attribute__((constructor(101), used)) void zdl_clear_stale_openmp_registration() {
  char path[96];
  std::snprintf(path, sizeof path, "/dev/shm/__KMP_REGISTERED_LIB_%d_%d", static_cast<int>(getpid()),
                static_cast<int>(getuid()));
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  const bool stale = holds_no_string(fd);
  close(fd);
  if (stale) unlink(path);
}

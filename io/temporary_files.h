// Temporary files a signal must not leave behind. AtomicFileWriter (io/file.h) lists its
// temporary file here while it lives; a program that holds a RemoveTemporariesOnSignal removes
// every listed file when SIGINT, SIGTERM or SIGHUP ends it, then ends by that signal as it would
// have (the shell sees 130, 143, 129). Without it, Ctrl-C in prepare_tokens left hidden
// ".NAME.tmp.XXXXXX" shards, as large as the shards, that nothing ever removes.
//
//   int main() { io::RemoveTemporariesOnSignal cleanup("prepare_tokens"); ... }
//
// train_gpt does not hold one: its InterruptScope (io/interrupt.h) stops at the end of a step
// and saves; its saves stage in a directory the next save clears.
#pragma once

namespace zdl::io {

// A slot of the list, or -1 when the list is full (the file is then not removed on a signal).
// `path` must stay valid until forget_temporary.
int list_temporary(const char* path);
// The same file under a new pointer (the old one's storage may then go).
void relist_temporary(int slot, const char* path);
void forget_temporary(int slot);

class RemoveTemporariesOnSignal {
 public:
  // `program`: named in the line printed when a signal removes files.
  explicit RemoveTemporariesOnSignal(const char* program);
  ~RemoveTemporariesOnSignal();  // the previous handlers again
  RemoveTemporariesOnSignal(const RemoveTemporariesOnSignal&) = delete;
  RemoveTemporariesOnSignal& operator=(const RemoveTemporariesOnSignal&) = delete;
};

}  // namespace zdl::io

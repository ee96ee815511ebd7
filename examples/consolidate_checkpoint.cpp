// consolidate_checkpoint: turns a sharded ZeRO checkpoint (dist::save_sharded, any world size
// and stage) into one GPT-2 safetensors file that io::load_gpt2, HF transformers or nanoGPT
// can read. One process, no launcher; memory holds one parameter at a time.
//
//   consolidate_checkpoint ckpt/latest gpt2.safetensors
//
// Exit codes: 0 done, 2 bad input (usage, missing/corrupted/foreign checkpoint), 1 anything else.
#include <cstdio>
#include <exception>
#include <string>

#include "core/check.h"
#include "dist/sharded_checkpoint.h"

int main(int argc, char** argv) {
  if (argc != 3 || std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help") {
    std::fprintf(stderr,
                 "usage: %s CKPT_DIR OUT.safetensors\n"
                 "  CKPT_DIR         a sharded checkpoint directory (layout.json + rank-<r>-of-<N>.safetensors)\n"
                 "  OUT.safetensors  the GPT-2 file to write (replaced atomically)\n",
                 argc > 0 ? argv[0] : "consolidate_checkpoint");
    return 2;
  }
  try {
    zdl::dist::consolidate_sharded(argv[1], argv[2]);
    zdl::io::TrainState st = zdl::dist::read_sharded_train_state(argv[1]);
    std::printf("wrote %s (step %lld)\n", argv[2], static_cast<long long>(st.step));
    return 0;
  } catch (const zdl::Error& e) {
    std::fprintf(stderr, "consolidate_checkpoint: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consolidate_checkpoint: unexpected error: %s\n", e.what());
    return 1;
  }
}

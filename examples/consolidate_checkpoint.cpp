// consolidate_checkpoint: turns a sharded ZeRO checkpoint (dist::save_sharded, any world size
// and stage) into one GPT-2-layout safetensors file that io::load_gpt2 (train_gpt --init-from),
// HF transformers or nanoGPT can read; or, given a directory, into model.safetensors plus the
// config.json that transformers' GPT2LMHeadModel.from_pretrained(dir) loads as is. One
// process, no launcher; memory holds one parameter at a time.
//
//   consolidate_checkpoint ckpt/latest gpt2.safetensors
//   consolidate_checkpoint ckpt/latest hf_model/          # model.safetensors + config.json
//
// Exit codes: 0 done, 2 bad input (usage, missing/corrupted/foreign checkpoint), 1 anything else.
#include <cstdio>
#include <exception>
#include <string>

#include "core/check.h"
#include "dist/checkpoint/sharded_checkpoint.h"
#include "io/environment.h"
#include "io/gpt2_format.h"
#include "io/hf_dir.h"
#include "io/temporary_files.h"

int main(int argc, char** argv) {
  const bool help = argc == 2 && (std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help");
  if (argc != 3 || help) {
    std::fprintf(help ? stdout : stderr,
                 "usage: %s CKPT_DIR OUT\n"
                 "  CKPT_DIR  a sharded checkpoint directory (layout.json + rank-<r>-of-<N>.safetensors)\n"
                 "  OUT       NAME.safetensors: one GPT-2 file (replaced atomically); any other name: a directory\n"
                 "            with model.safetensors and config.json for Hugging Face transformers\n",
                 argc > 0 ? argv[0] : "consolidate_checkpoint");
    return help ? 0 : 2;
  }
  if (const std::string problem = zdl::io::environment_problem(); !problem.empty()) {
    std::fprintf(stderr, "consolidate_checkpoint: %s\n", problem.c_str());
    return 2;
  }
  zdl::io::RemoveTemporariesOnSignal cleanup("consolidate_checkpoint");  // Ctrl-C leaves no partial file
  const std::string ckpt = argv[1], out = argv[2];
  try {
    const zdl::io::TrainState st = zdl::dist::read_sharded_train_state(ckpt);
    if (out.ends_with(".safetensors")) {
      zdl::dist::consolidate_sharded(ckpt, out);
      std::printf("wrote %s (step %lld)\n", out.c_str(), static_cast<long long>(st.step));
      return 0;
    }
    const auto config = st.metadata.find("config");
    ZDL_CHECK(config != st.metadata.end(), "the checkpoint has no GPT config in its metadata[\"config\"]");
    const zdl::nn::GPTConfig cfg = zdl::io::gpt_config_from_json(config->second, "the checkpoint's model config");
    // Only OUT itself is created (its parent must exist), with both files at once; nothing is
    // left on a failure (e.g. an OUT inside the checkpoint, which consolidate_sharded refuses).
    zdl::io::write_hf_dir(out, cfg, [&](const std::string& weights) { zdl::dist::consolidate_sharded(ckpt, weights); });
    std::printf("wrote %s (model.safetensors, config.json; step %lld)\n", out.c_str(), static_cast<long long>(st.step));
    return 0;
  } catch (const zdl::Error& e) {
    std::fprintf(stderr, "consolidate_checkpoint: %s\n", zdl::without_code_location(e.what()).c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consolidate_checkpoint: unexpected error: %s\n", e.what());
    return 1;
  }
}

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
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <string_view>
#include <exception>
#include <string>

#include "core/check.h"
#include "dist/checkpoint/sharded_checkpoint.h"
#include "io/environment.h"
#include "io/gpt2_format.h"
#include "io/hf_dir.h"
#include "io/temporary_files.h"

namespace {

namespace fs = std::filesystem;

// NAME.safetensors, in any case (x.SAFETENSORS is a file too, not a directory).
bool is_safetensors_name(const std::string& out) {
  constexpr std::string_view ext = ".safetensors";
  if (out.size() < ext.size()) return false;
  for (size_t i = 0; i < ext.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(out[out.size() - ext.size() + i])) != ext[i]) return false;
  return true;
}

// OUT in the user's words, before the writers' own checks name their staging paths: not the
// checkpoint or a path inside it, and in a directory that exists.
void check_output_path(const std::string& ckpt, const std::string& out) {
  std::error_code e1, e2;
  const fs::path c = fs::weakly_canonical(ckpt, e1), o = fs::weakly_canonical(out, e2);
  if (!e1 && !e2 && std::mismatch(c.begin(), c.end(), o.begin(), o.end()).first == c.end())
    ZDL_CHECK(false, "OUT '", out, "' is ", c == o ? "the checkpoint directory" : "inside the checkpoint directory",
              " CKPT_DIR '", ckpt, "': writing there would destroy the checkpoint; choose a path outside it");
  fs::path named = fs::path(out).lexically_normal();
  if (named.filename().empty()) named = named.parent_path();  // "hf_model/" names hf_model
  const fs::path parent = named.parent_path();
  ZDL_CHECK(parent.empty() || fs::is_directory(parent), "the directory '", parent.string(), "' of OUT '", out,
            "' does not exist");
}

}  // namespace

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
    check_output_path(ckpt, out);
    if (is_safetensors_name(out)) {
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

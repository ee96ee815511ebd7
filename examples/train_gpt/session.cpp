#include "examples/train_gpt/session.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "data/data_record.h"
#include "dist/checkpoint/sharded_checkpoint.h"
#include "examples/train_gpt/run_settings.h"
#include "io/hf_dir.h"
#include "io/program_main.h"
#include "nn/activation_checkpoint.h"

namespace zdl::train_gpt {

using io::UsageError;

dist::Trainer::Batch Session::step_rows(int64_t step, int64_t first, int64_t count) const {
  data::Batch b = ds().step_rows(step, first, count);
  return dist::Trainer::Batch{b.inputs.to(dev), b.targets.to(dev)};
}

std::shared_ptr<nn::GPT> build_model(dist::ZeroPartitioner& zero, const Args& a, const nn::GPTConfig& cfg) {
  std::shared_ptr<nn::GPT> model;
  {
    auto scope = zero.placement_scope(a.seed);
    model = std::make_shared<nn::GPT>(cfg);
  }
  nn::checkpoint_every(model->h, a.activation_checkpointing);  // the same bits, less memory
  zero.wrap(*model);
  return model;
}

void load_init_from(dist::Communicator& comm, dist::ZeroPartitioner& zero, nn::GPT& model, const std::string& path) {
  // A bad copy on one rank ends every rank with its message. Running out of memory is no input
  // error: it takes the failure path (exit 1).
  io::agree_on_usage(comm, [&] {
    try {
      dist::GatheredParameters g(zero, /*modify=*/true);
      io::load_gpt2(model, path);
    } catch (const OutOfMemoryError&) {
      throw;
    } catch (const Error& e) {
      throw UsageError(std::string("--init-from: ") + e.what());
    }
  });
}

std::pair<double, int64_t> evaluate(Session& x, data::Split split, int64_t n) {
  const int64_t all = x.ds().num_eval_batches(split);
  n = n > 0 ? std::min(n, all) : all;  // --eval-batches 0: the whole split
  if (n <= 0) throw Error(detail::str("evaluation: the ", data::split_name(split), " split holds fewer than one batch of tokens"));
  auto rows = [&](int64_t i) {
    data::Batch b = x.ds().eval_batch(split, i);
    return dist::Trainer::Batch{b.inputs.to(x.dev), b.targets.to(x.dev)};
  };
  auto loss = [&](const Tensor& in, const Tensor& targets) { return x.loss(in, targets); };
  return std::make_pair(x.trainer.evaluate(x.model, n, rows, loss), n);
}

int64_t resume(Session& x) {
  const Args& a = x.a;
  io::agree_on_usage(x.comm, [&] {  // each rank's copy of the checkpoint: agreed
    if (a.eval_only) return;
    try {
      data::check_bytes_match_record(x.s.resumed->metadata, x.ds().files(), x.file_fps,
                                     "--data '" + x.ds().files().source() + "'");
    } catch (const Error& e) {
      throw UsageError(std::string("--resume: ") + e.what());
    }
  });
  try {  // collective, and agreed: a bad checkpoint on any rank fails every rank with its message
    *x.s.resumed = dist::load_sharded(a.resume, x.zero, x.opt);
  } catch (const OutOfMemoryError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(std::string("--resume: ") + e.what());
  }
  const int64_t first_step = x.s.resumed->step;
  x.ds().set_position(first_step);
  io::agree_on_usage(x.comm, [&] {
    if (!a.eval_only && a.steps < first_step)
      throw UsageError(detail::str("--steps ", a.steps, " is before the checkpoint's step ", first_step,
                                   ": give --steps ", first_step, " or more (the run's last step)"));
    if (!a.eval_only && a.stop_after > 0 && a.stop_after <= first_step)
      throw UsageError(detail::str("--stop-after ", a.stop_after, " is not after the checkpoint's step ", first_step,
                                   ": nothing would be trained"));
  });
  return first_step;
}

void save(Session& x, int64_t step) {
  io::TrainState st;
  st.step = step;
  st.data_position = x.ds().position();
  st.metadata["config"] = io::gpt_config_to_json(x.s.cfg);
  st.metadata[data::kDataFingerprintKey] = x.data_fp.to_string();
  st.metadata[data::kDataRecordKey] = data::data_record(x.ds().files(), x.file_fps);
  st.metadata["seed"] = std::to_string(x.a.seed);
  st.metadata["run"] = run_settings_json(x.a);
  dist::save_sharded(x.a.save, x.zero, x.opt, st);
}

namespace {

// Rank 0, after --export-hf failed with `error`: where the trained model is now, as the run's
// last message.
std::string rescue_model(Session& x, const std::string& error, const io::Metadata& meta) {
  std::string msg = "--export-hf '" + x.a.export_hf + "' failed: " + error;
  if (!x.a.save.empty())  // the last step was saved before the export
    return msg + "; the trained model is in the checkpoint '" + x.a.save + "': consolidate_checkpoint " + x.a.save +
           " OUT_DIR writes the same directory";
  const char* tmp = std::getenv("TMPDIR");
  const std::string name = "train_gpt-model-" + std::to_string(::getpid());
  const std::string places[] = {std::filesystem::absolute(name).string(),
                                std::string(tmp && *tmp ? tmp : "/tmp") + "/" + name};
  for (const std::string& place : places) {
    try {
      io::export_hf_dir(x.model, place, meta);
      return msg + "; the model was written to '" + place + "' instead (model.safetensors, config.json)";
    } catch (const Error& e) {
      msg += "; writing it to '" + place + "' failed too: " + e.what();
    }
  }
  return msg + "; the trained model is lost";
}

}  // namespace

void export_hf(Session& x, io::Progress& progress) {
  std::string failure;
  {
    dist::GatheredParameters gathered(x.zero);  // collective under ZeRO-3: every rank gathers
    if (x.lead()) {
      const io::Metadata meta = {{"step", std::to_string(x.ds().position())}};
      try {
        io::export_hf_dir(x.model, x.a.export_hf, meta);
        progress.message("exported the model to " + x.a.export_hf + " (model.safetensors, config.json)");
      } catch (const OutOfMemoryError&) {
        throw;
      } catch (const Error& e) {
        failure = rescue_model(x, e.what(), meta);
      }
    }
  }
  // Every rank ends the same way: rank 0 prints the message, exit 1.
  const bool failed = x.comm.size() == 1 ? !failure.empty() : x.comm.all_gather_i64(failure.empty() ? 0 : 1)[0] != 0;
  if (failed) throw io::CollectiveStop(failure);
}

}  // namespace zdl::train_gpt

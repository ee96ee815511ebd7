// Optimizers over parameter groups, with their state in one flat buffer per group and state
// kind (AdamW: exp_avg, exp_avg_sq; SGD: momentum). Flat buffers are what the ZeRO sharded
// optimizer (dist/) slices by rank; here each parameter owns a contiguous range of them.
//
//   optim::AdamW opt(optim::decay_groups(*model, /*weight_decay=*/0.1), {.lr = 3e-4});
//   loss.backward(); opt.step(); opt.zero_grad();
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace zdl::optim {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

struct ParamGroup {
  std::string name;
  std::vector<Tensor> params;
  double weight_decay = 0.0;
};

// Throws unless grad_scale (what a step multiplies every gradient by) is a finite number >= 0.
void check_grad_scale(double grad_scale, const char* who);

class Optimizer {
 public:
  explicit Optimizer(std::vector<ParamGroup> groups);
  virtual ~Optimizer() = default;

  // One update from the accumulated gradients; grad_scale multiplies every gradient first
  // (clipping folds in here instead of rewriting the gradients). Parameters without a
  // gradient are skipped.
  virtual void step(double grad_scale = 1.0) = 0;
  void zero_grad();

  double lr() const { return lr_; }
  // Throws unless lr is a finite number >= 0 (NaN turned every parameter into NaN).
  void set_lr(double lr);
  int64_t step_count() const { return step_; }
  const std::vector<ParamGroup>& groups() const { return groups_; }

  // Per-parameter views of the state for checkpoints: "<param name>.<kind>", plus "step". A
  // parameter without a name of its own (empty, or one another parameter also has) is
  // "group<g>.param<i>" instead, so that every key names one parameter.
  NamedTensors state() const;
  // Loads what state() wrote (shapes checked; all names must be present).
  void load_state(const NamedTensors& state);

 protected:
  // Adds a flat state buffer of `kind` per group (zeros, category OptimizerState).
  void add_state_kind(const std::string& kind);
  // The state of group g, kind k, as a flat tensor; params' offsets index into it.
  const Tensor& flat_state(size_t group, size_t kind) const { return flat_[group][kind]; }
  int64_t offset_of(size_t group, size_t param) const { return offsets_[group][param]; }

  std::vector<ParamGroup> groups_;
  double lr_ = 1e-3;
  int64_t step_ = 0;

 private:
  std::vector<std::string> kinds_;
  std::vector<std::vector<Tensor>> flat_;       // [group][kind]
  std::vector<std::vector<int64_t>> offsets_;   // [group][param]
  std::vector<std::vector<std::string>> keys_;  // [group][param]: state()'s name of each
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.95;  // GPT-2 training's choice; PyTorch's default is 0.999
  double eps = 1e-8;
  // Throws naming the first bad field and its value; `who` starts the message.
  void validate(const std::string& who) const;
};

// AdamW with decoupled weight decay taken per group (ParamGroup::weight_decay).
class AdamW final : public Optimizer {
 public:
  AdamW(std::vector<ParamGroup> groups, const AdamWOptions& o);
  void step(double grad_scale = 1.0) override;
  AdamWOptions options;
};

struct SGDOptions {
  double lr = 1e-2;
  double momentum = 0.0;
};

class SGD final : public Optimizer {
 public:
  SGD(std::vector<ParamGroup> groups, const SGDOptions& o);
  void step(double grad_scale = 1.0) override;
  SGDOptions options;
};

}  // namespace zdl::optim

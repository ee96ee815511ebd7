#include "optim/optimizer.h"

#include <cmath>
#include <map>

#include "autograd/grad_mode.h"
#include "kernels/cpu/optim.h"

namespace zdl::optim {

namespace {
// A parameter in a message: its name, or its place for a tensor without one.
std::string named(const Tensor& p, const std::string& group, size_t i) {
  return p.name().empty() ? detail::str("#", i, " (unnamed) of group '", group, "'") : "'" + p.name() + "'";
}
}  // namespace

Optimizer::Optimizer(std::vector<ParamGroup> groups) : groups_(std::move(groups)) {
  ZDL_CHECK(!groups_.empty(), "optimizer: no parameter groups given");
  std::map<std::pair<const void*, int64_t>, std::string> seen;  // each parameter (storage, offset) once
  for (auto& g : groups_) {
    ZDL_CHECK(std::isfinite(g.weight_decay), "optimizer: group '", g.name, "' has weight decay ", g.weight_decay);
    std::vector<int64_t> offs;
    int64_t at = 0;
    for (size_t i = 0; i < g.params.size(); ++i) {
      const Tensor& p = g.params[i];
      check_defined(p, "optimizer", "param");
      const std::string who = named(p, g.name, i);
      ZDL_CHECK(p.is_leaf() && p.requires_grad(), "optimizer: parameter ", who, " must be a leaf that requires grad");
      ZDL_CHECK(p.dtype() == DType::F32 || p.dtype() == DType::F64, "optimizer: parameter ", who, " has dtype ",
                dtype_name(p.dtype()), "; masters must be f32 (or f64 for checks)");
      ZDL_CHECK(p.dtype() == g.params[0].dtype(), "optimizer: group '", g.name, "' mixes dtypes");
      // The update walks numel() elements from data(): a strided view (a slice with a step) would
      // have its neighbours updated instead, and a parameter listed twice would be updated twice.
      ZDL_CHECK(p.is_contiguous(), "optimizer: parameter ", who, " of shape=", shape_str(p.shape()),
                " is not contiguous; give the optimizer the tensor it views, or a contiguous copy");
      const auto [it, fresh] = seen.emplace(std::make_pair(static_cast<const void*>(p.storage().get()), p.offset()), g.name);
      ZDL_CHECK(fresh, "optimizer: parameter ", who, " is listed twice, in group '", it->second, "' and in group '",
                g.name, "'; list each parameter once");
      offs.push_back(at);
      at += p.numel();
    }
    offsets_.push_back(std::move(offs));
    flat_.emplace_back();
  }
  // Two unnamed parameters (or two models' "fc.weight") shared one key: a load gave both the
  // state of one of them.
  std::map<std::string, int> uses;
  for (auto& g : groups_)
    for (auto& p : g.params) ++uses[p.name()];
  for (size_t g = 0; g < groups_.size(); ++g) {
    keys_.emplace_back();
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const std::string& n = groups_[g].params[i].name();
      keys_[g].push_back(!n.empty() && uses[n] == 1 ? n : detail::str("group", g, ".param", i));
    }
  }
}

void check_grad_scale(double grad_scale, const char* who) {
  ZDL_CHECK(std::isfinite(grad_scale) && grad_scale >= 0, who, ": grad_scale must be a finite number >= 0, got ",
            grad_scale, " (it multiplies every gradient: NaN would make every parameter NaN)");
}

void Optimizer::set_lr(double lr) {
  ZDL_CHECK(std::isfinite(lr) && lr >= 0, "optimizer: lr must be a finite number >= 0, got ", lr);
  lr_ = lr;
}

void Optimizer::add_state_kind(const std::string& kind) {
  MemoryScope scope(MemoryCategory::OptimizerState);
  kinds_.push_back(kind);
  for (size_t g = 0; g < groups_.size(); ++g) {
    int64_t n = 0;
    for (auto& p : groups_[g].params) n += p.numel();
    DType t = groups_[g].params.empty() ? DType::F32 : groups_[g].params[0].dtype();
    Device d = groups_[g].params.empty() ? Device::cpu() : groups_[g].params[0].device();
    flat_[g].push_back(Tensor::zeros({n}, t, d));
  }
}

void Optimizer::zero_grad() {
  for (auto& g : groups_)
    for (auto& p : g.params) p.set_grad(Tensor());
}

NamedTensors Optimizer::state() const {
  NamedTensors out;
  for (size_t g = 0; g < groups_.size(); ++g)
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const Tensor& p = groups_[g].params[i];
      for (size_t k = 0; k < kinds_.size(); ++k) {
        Tensor flat = flat_[g][k];
        Tensor view = Tensor::from_storage(flat.storage(), p.shape(), contiguous_strides(p.shape()),
                                           offsets_[g][i], flat.dtype());
        out.emplace_back(keys_[g][i] + "." + kinds_[k], view);
      }
    }
  out.emplace_back("step", Tensor::scalar(static_cast<double>(step_), DType::I64));
  return out;
}

void Optimizer::load_state(const NamedTensors& state) {
  std::map<std::string, Tensor> by_name(state.begin(), state.end());
  auto mine = this->state();
  std::string missing;
  for (auto& [name, t] : mine) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      missing += (missing.empty() ? "" : ", ") + name;
      continue;
    }
    ZDL_CHECK(it->second.shape() == t.shape(), "optimizer state '", name, "': expected shape=", shape_str(t.shape()),
              ", got shape=", shape_str(it->second.shape()));
  }
  ZDL_CHECK(missing.empty(), "optimizer state is missing: ", missing);
  NoGradGuard ng;
  for (auto& [name, t] : mine) {
    if (name == "step") step_ = static_cast<int64_t>(by_name[name].item());
    else t.copy_(by_name[name]);
  }
}

void AdamWOptions::validate(const std::string& who) const {
  ZDL_CHECK(std::isfinite(lr) && lr >= 0, who, ": lr must be a finite number >= 0, got ", lr);
  ZDL_CHECK(beta1 >= 0 && beta1 < 1, who, ": beta1 must be in [0, 1), got ", beta1);
  ZDL_CHECK(beta2 >= 0 && beta2 < 1, who, ": beta2 must be in [0, 1), got ", beta2);
  ZDL_CHECK(std::isfinite(eps) && eps > 0, who, ": eps must be a finite number > 0, got ", eps);
}

AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& o) : Optimizer(std::move(groups)), options(o) {
  o.validate("AdamW");
  lr_ = o.lr;
  add_state_kind("exp_avg");
  add_state_kind("exp_avg_sq");
}

void AdamW::step(double grad_scale) {
  check_grad_scale(grad_scale, "AdamW::step");
  NoGradGuard ng;
  ++step_;
  for (size_t g = 0; g < groups_.size(); ++g) {
    kernels::cpu::AdamWParams h{lr_, options.beta1, options.beta2, options.eps, groups_[g].weight_decay, step_};
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const Tensor& p = groups_[g].params[i];
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      ZDL_CHECK(p.device().is_cpu(), "AdamW: parameter ", named(p, groups_[g].name, i), " is on ", p.device().str(),
                "; the CPU optimizer needs CPU parameters");
      if (!grad.is_contiguous()) grad = grad.contiguous_copy();
      int64_t off = offset_of(g, i);
      ZDL_DISPATCH_FLOAT(p.dtype(), "AdamW", [&](auto tag) {
        using T = decltype(tag);
        using S = kernels::cpu::opt_state_t<T>;
        kernels::cpu::adamw_update<T>(p.numel(), p.data<T>(), grad.data<T>(), flat_state(g, 0).data<S>() + off,
                                      flat_state(g, 1).data<S>() + off, h, grad_scale);
      });
      p.storage()->bump_version();  // an in-place write: a graph that saved p refuses its backward
    }
  }
}

SGD::SGD(std::vector<ParamGroup> groups, const SGDOptions& o) : Optimizer(std::move(groups)), options(o) {
  ZDL_CHECK(o.lr >= 0 && o.momentum >= 0, "SGD: bad hyperparameters lr=", o.lr, " momentum=", o.momentum);
  lr_ = o.lr;
  add_state_kind("momentum");
}

void SGD::step(double grad_scale) {
  check_grad_scale(grad_scale, "SGD::step");
  NoGradGuard ng;
  ++step_;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const Tensor& p = groups_[g].params[i];
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      if (!grad.is_contiguous()) grad = grad.contiguous_copy();
      int64_t off = offset_of(g, i);
      ZDL_DISPATCH_FLOAT(p.dtype(), "SGD", [&](auto tag) {
        using T = decltype(tag);
        using S = kernels::cpu::opt_state_t<T>;
        kernels::cpu::sgd_update<T>(p.numel(), p.data<T>(), grad.data<T>(), flat_state(g, 0).data<S>() + off, lr_,
                                    options.momentum, groups_[g].weight_decay, grad_scale);
      });
      p.storage()->bump_version();
    }
  }
}

}  // namespace zdl::optim

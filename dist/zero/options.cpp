#include "dist/zero/options.h"

#include "core/check.h"

namespace zdl::dist {

const char* stage_name(ZeroStage s) {
  switch (s) {
    case ZeroStage::DDP: return "ddp";
    case ZeroStage::One: return "zero1";
    case ZeroStage::Two: return "zero2";
    case ZeroStage::Three: return "zero3";
  }
  return "?";
}

StagePolicy StagePolicy::of(ZeroStage s) {
  switch (s) {
    case ZeroStage::DDP: return {};
    case ZeroStage::One: return {.shard_optimizer = true, .gather_after_step = true};
    case ZeroStage::Two: return {.shard_optimizer = true, .shard_gradients = true, .gather_after_step = true};
    case ZeroStage::Three: return {.shard_optimizer = true, .shard_gradients = true, .shard_parameters = true};
  }
  return {};
}

StagePolicy StagePolicy::of(ZeroStage s, const OffloadOptions& o, Device device) {
  StagePolicy p = of(s);
  p.optimizer_on_nvme = o.optimizer == OffloadTarget::Nvme;
  p.optimizer_on_host = o.optimizer == OffloadTarget::Cpu && (device.is_cuda() || o.host_tier_on_cpu_ranks);
  p.params_on_nvme = o.params == OffloadTarget::Nvme;
  return p;
}

const char* offload_target_name(OffloadTarget t) {
  switch (t) {
    case OffloadTarget::None: return "none";
    case OffloadTarget::Cpu: return "cpu";
    case OffloadTarget::Nvme: return "nvme";
  }
  return "?";
}

OffloadTarget offload_target_from_name(const std::string& s) {
  for (OffloadTarget t : {OffloadTarget::None, OffloadTarget::Cpu, OffloadTarget::Nvme})
    if (s == offload_target_name(t)) return t;
  throw Error(detail::str("offload target must be none, cpu or nvme, got '", s, "'"));
}

const char* stage_title(ZeroStage s) {
  switch (s) {
    case ZeroStage::DDP: return "DDP";
    case ZeroStage::One: return "ZeRO-1";
    case ZeroStage::Two: return "ZeRO-2";
    case ZeroStage::Three: return "ZeRO-3";
  }
  return "?";
}

ZeroStage stage_from_int(int s) {
  ZDL_CHECK(s >= 0 && s <= 3, "ZeRO stage must be 0 (DDP), 1, 2 or 3, got ", s);
  return static_cast<ZeroStage>(s);
}

}  // namespace zdl::dist

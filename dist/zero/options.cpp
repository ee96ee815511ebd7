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

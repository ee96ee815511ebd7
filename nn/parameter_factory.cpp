#include "nn/parameter_factory.h"

#include "core/memory.h"

namespace zdl::nn {

namespace {

EagerParameterFactory& default_factory() {
  static EagerParameterFactory f;
  return f;
}

thread_local ParameterFactory* t_factory = nullptr;

struct InitState {
  uint64_t seed = 0;
  uint64_t next_stream = 0;
  Device device = Device::cpu();
  DType dtype = DType::F32;
};
thread_local InitState t_init;

}  // namespace

Tensor EagerParameterFactory::create(const ParameterSpec& spec) {
  MemoryScope scope(MemoryCategory::Parameter);
  Tensor host = Tensor::empty(spec.shape, spec.dtype);
  init_elements(spec.init, spec.seed, spec.stream, 0, host);
  if (spec.device.is_cpu()) return host;
  Tensor dev = Tensor::empty(spec.shape, spec.dtype, spec.device);
  dev.copy_(host);
  return dev;
}

ParameterFactoryScope::ParameterFactoryScope(ParameterFactory& factory) : prev_(t_factory) { t_factory = &factory; }
ParameterFactoryScope::~ParameterFactoryScope() { t_factory = prev_; }

ParameterFactory& current_parameter_factory() { return t_factory ? *t_factory : default_factory(); }

InitContext::InitContext(uint64_t seed, Device device, DType dtype) {
  prev_ = {t_init.seed, t_init.next_stream, t_init.device, t_init.dtype};
  t_init = {seed, 0, device, dtype};
}

InitContext::~InitContext() { t_init = {prev_.seed, prev_.next_stream, prev_.device, prev_.dtype}; }

void InitContext::assign(ParameterSpec& spec) {
  spec.seed = t_init.seed;
  spec.stream = t_init.next_stream++;
  spec.device = t_init.device;
  spec.dtype = t_init.dtype;
}

}  // namespace zdl::nn

// Where a registered parameter's bytes come from (docs/design.md, mechanism 3).
//
// `Module::register_parameter` does not allocate: it hands a ParameterSpec to the factory on
// top of this thread's factory stack. The default factory allocates the full tensor (category
// Parameter) and initializes it. The ZeRO partition manager (dist/) pushes its own factory
// while a model is built, so that under ZeRO-3 each rank allocates and initializes only its
// shard: nn/ never includes dist/, it only calls this interface.
//
// Every parameter gets a distinct RNG stream: the registration counter of the current
// InitContext. Building the same model in the same order gives the same streams on every rank.
//
//   { nn::InitContext ctx(/*seed=*/1234); auto model = std::make_shared<GPT>(cfg); }
#pragma once
#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "nn/init.h"

namespace zdl::nn {

class Module;

struct ParameterSpec {
  Module* owner = nullptr;   // the module registering it
  std::string local_name;    // name inside owner (full dotted names exist once the tree is built)
  Shape shape;
  DType dtype = DType::F32;
  Device device = Device::cpu();
  Init init;
  uint64_t seed = 0;
  uint64_t stream = 0;       // unique per parameter within its InitContext
};

class ParameterFactory {
 public:
  virtual ~ParameterFactory() = default;
  // Returns the parameter tensor (a leaf; requires_grad is set by the caller).
  virtual Tensor create(const ParameterSpec& spec) = 0;
};

// Allocates the whole parameter and fills it from its init recipe.
class EagerParameterFactory final : public ParameterFactory {
 public:
  Tensor create(const ParameterSpec& spec) override;
};

// Makes `factory` the one used by register_parameter on this thread while alive (nests).
class ParameterFactoryScope {
 public:
  explicit ParameterFactoryScope(ParameterFactory& factory);
  ~ParameterFactoryScope();
  ParameterFactoryScope(const ParameterFactoryScope&) = delete;
  ParameterFactoryScope& operator=(const ParameterFactoryScope&) = delete;

 private:
  ParameterFactory* prev_;
};

ParameterFactory& current_parameter_factory();

// Seed and stream counter for parameter inits on this thread while alive (nests). Outside any
// context: seed 0 and a thread-wide counter.
class InitContext {
 public:
  explicit InitContext(uint64_t seed, Device device = Device::cpu(), DType dtype = DType::F32);
  ~InitContext();
  InitContext(const InitContext&) = delete;
  InitContext& operator=(const InitContext&) = delete;

  // Fills seed and the next stream of the current context into spec; device and dtype too.
  static void assign(ParameterSpec& spec);

 private:
  struct State {
    uint64_t seed = 0;
    uint64_t next_stream = 0;
    Device device = Device::cpu();
    DType dtype = DType::F32;
  };
  State prev_;
};

}  // namespace zdl::nn

// Where a tensor's bytes live: the host, or CUDA device i.
#pragma once
#include <ostream>
#include <string>

namespace zdl {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int i = 0) { return {DeviceType::CUDA, i}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool operator==(const Device& o) const { return type == o.type && (type == DeviceType::CPU || index == o.index); }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
};

inline std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

// Parses "cpu", "cuda", "cuda:1".
Device device_from_name(const std::string& name);

// True when this build has CUDA support and at least one device is visible.
bool cuda_available();
int cuda_device_count();

}  // namespace zdl

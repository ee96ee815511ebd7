// Where a tensor's bytes live: the host, or CUDA device i.
#pragma once
#include <cstdint>
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
// Visible CUDA devices (0 in a CPU build), asked of the driver once per process.
int cuda_device_count();

// What a device is: its name, its memory and, for a GPU, its peak dense bf16 tensor-core rate
// (0 where the GPU is not in the table; MFU is reported against it).
struct DeviceInfo {
  std::string name;
  int64_t total_bytes = 0;
  double peak_bf16_tflops = 0;
};
DeviceInfo device_info(Device d);
// Peak dense bf16 TFLOP/s by GPU name (NVIDIA's data sheets, sparsity not counted); 0 if unknown.
double peak_bf16_tflops(const std::string& gpu_name);
// Waits for the work queued on this thread's stream of `d` (nothing on the CPU) and throws the
// first CUDA error seen so far, including one a free could only record.
void synchronize(Device d);

}  // namespace zdl

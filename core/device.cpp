#include "core/device.h"

#include <unistd.h>

#include <fstream>

#include "core/check.h"
#include "core/device_copy.h"

namespace zdl {

Device device_from_name(const std::string& name) {
  if (name == "cpu") return Device::cpu();
  if (name == "cuda") return Device::cuda(0);
  if (name.rfind("cuda:", 0) == 0) {
    std::string idx = name.substr(5);
    ZDL_CHECK(!idx.empty() && idx.find_first_not_of("0123456789") == std::string::npos,
              "bad device '", name, "' (expected cpu, cuda or cuda:N)");
    return Device::cuda(std::stoi(idx));
  }
  ZDL_CHECK(false, "bad device '", name, "' (expected cpu, cuda or cuda:N)");
  return Device::cpu();
}

double peak_bf16_tflops(const std::string& name) {
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  if (has("H200") || has("GH200")) return 989;
  if (has("H100")) return has("PCIe") ? 756 : has("NVL") ? 835 : 989;  // SXM ("H100 80GB HBM3"): 989
  if (has("A100")) return 312;
  if (has("A10G")) return 70;
  if (has("L40S")) return 362;
  if (has("RTX 4090")) return 165;
  return 0;
}

namespace {

// The host: the CPU's model name (as /proc/cpuinfo gives it) and the physical memory.
DeviceInfo host_info() {
  DeviceInfo info{.name = "cpu"};
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon != std::string::npos && colon + 2 <= line.size()) info.name = line.substr(colon + 2);
    break;
  }
  info.total_bytes = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<int64_t>(sysconf(_SC_PAGE_SIZE));
  return info;
}

}  // namespace

DeviceInfo device_info(Device d) {
  if (d.is_cpu()) return host_info();
  DeviceInfo info = cuda_device_info(d.index);
  info.peak_bf16_tflops = peak_bf16_tflops(info.name);
  return info;
}

void synchronize(Device d) {
  if (d.is_cuda()) cuda_synchronize();
}

}  // namespace zdl

#include "core/device.h"

#include "core/check.h"

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

}  // namespace zdl

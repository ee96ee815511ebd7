// Byte copies between devices (host<->CUDA, CUDA<->CUDA). Synchronous with respect to the host.
#pragma once
#include <cstddef>

#include "core/device.h"

namespace zdl {

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
// Sets bytes to zero on any device.
void zero_bytes(void* dst, Device device, size_t bytes);

}  // namespace zdl

// The CUDA runtime below device.h, implemented by core/cuda_runtime.cpp (or core/cuda_stub.cpp in
// a CPU build): byte copies between devices (host<->CUDA, CUDA<->CUDA; synchronous with respect
// to the host), and the GPU side of device_info and synchronize.
#pragma once
#include <cstddef>

#include "core/device.h"

namespace zdl {

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
// Sets bytes to zero on any device.
void zero_bytes(void* dst, Device device, size_t bytes);
// Name and memory of CUDA device `index`.
DeviceInfo cuda_device_info(int index);
// Waits for this thread's stream on the current GPU; throws the first recorded CUDA error.
void cuda_synchronize();

}  // namespace zdl

// Counter-based random numbers (Philox4x32-10, Salmon et al. 2011).
//
// Every random value is a pure function of (seed, stream, element index): any element of a
// random tensor can be generated alone. This is what lets a ZeRO-3 rank initialize only its
// shard of a parameter and still get bits identical to the same slice of a single-process
// init, whatever the world size (docs/design.md, mechanism 3). The same holds on the GPU: the
// block function and uniform() are ZDL_HOST_DEVICE, so a CUDA kernel (kernels/cuda/dropout.cu)
// computes the very same words as the CPU for the same (seed, stream, index).
//
//   Philox gen(seed, /*stream=*/param_id);
//   float u = gen.uniform(i);      // element i, in [0, 1)
//   float z = gen.normal(i);       // element i, standard normal
//
// This header is C++17-clean and included by .cu files: the device-callable part uses no
// std::array (whose accessors are host-only without --expt-relaxed-constexpr).
#pragma once
#include <array>
#include <cmath>
#include <cstdint>

// Marks functions callable from both host and device code when compiled by nvcc.
#if defined(__CUDACC__)
#define ZDL_HOST_DEVICE __host__ __device__
#else
#define ZDL_HOST_DEVICE
#endif

namespace zdl {

// The four 32-bit output words of one Philox block.
struct PhiloxWords {
  uint32_t w[4];
};

struct Philox {
  uint64_t seed;
  uint64_t stream;

  ZDL_HOST_DEVICE Philox(uint64_t seed_, uint64_t stream_) : seed(seed_), stream(stream_) {}

  // The 4x32-bit block for counter `index`. Key = seed; counter = (index, stream).
  // Integer arithmetic only: host and device give the same bits.
  static ZDL_HOST_DEVICE PhiloxWords words(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t c0 = static_cast<uint32_t>(index), c1 = static_cast<uint32_t>(index >> 32);
    uint32_t c2 = static_cast<uint32_t>(stream), c3 = static_cast<uint32_t>(stream >> 32);
    uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
    for (int round = 0; round < 10; ++round) {
      uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
      uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
      uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
      uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
      c0 = hi1 ^ c1 ^ k0;
      c1 = lo1;
      c2 = hi0 ^ c3 ^ k1;
      c3 = lo0;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    return PhiloxWords{{c0, c1, c2, c3}};
  }

  // The same block as a std::array (host code).
  static std::array<uint32_t, 4> block(uint64_t seed, uint64_t stream, uint64_t index) {
    PhiloxWords b = words(seed, stream, index);
    return {b.w[0], b.w[1], b.w[2], b.w[3]};
  }

  std::array<uint32_t, 4> block(uint64_t index) const { return block(seed, stream, index); }

  // Maps 24 random bits to [0, 1) exactly representable in f32: (x >> 8) * 2^-24, exact.
  static ZDL_HOST_DEVICE float to_unit(uint32_t x) { return static_cast<float>(x >> 8) * (1.0f / 16777216.0f); }

  ZDL_HOST_DEVICE float uniform(uint64_t index) const { return to_unit(words(seed, stream, index).w[0]); }

  // Box-Muller on two uniforms of the element's own block; u1 in (0, 1]. Host only: the
  // device's libm would round differently, so a device normal() could not promise the CPU's bits.
  float normal(uint64_t index) const {
    auto b = block(index);
    float u1 = (static_cast<float>(b[0] >> 8) + 1.0f) * (1.0f / 16777216.0f);
    float u2 = to_unit(b[1]);
    return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853071795864f * u2);
  }
};

}  // namespace zdl

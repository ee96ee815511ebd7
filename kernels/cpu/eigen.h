// Eigen for the CPU kernels that use it (matmul, attention, gelu): include this, not
// <Eigen/Core>.
//
// GCC 12 inlines its own AVX-512 intrinsics (which start from _mm512_undefined_*) into Eigen's
// packet code and then reports "'__Y' may be used uninitialized" hundreds of times per file: a
// known false positive of the compiler's headers (GCC bug 105593), not a finding in Eigen or
// here. It is silenced for the rest of these translation units only, and only under GCC, so a
// build log stays clean with both compilers while zerodl's other files keep the warning.
#pragma once
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <Eigen/Core>

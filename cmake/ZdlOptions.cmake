# Build options shared by every target.
option(ZDL_BUILD_TESTS "Build the GoogleTest suite" ON)
option(ZDL_NATIVE "Optimize for the building machine's CPU (-march=native)" ON)

set(ZDL_WARNINGS -Wall -Wextra -Wno-unused-parameter)
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  # `#pragma omp simd` on loops clang already handles its own way is not worth a warning.
  list(APPEND ZDL_WARNINGS -Wno-pass-failed)
endif()
set(ZDL_ARCH_FLAGS "")
if(ZDL_NATIVE)
  include(CheckCXXCompilerFlag)
  check_cxx_compiler_flag(-march=native ZDL_HAS_MARCH_NATIVE)
  if(ZDL_HAS_MARCH_NATIVE)
    list(APPEND ZDL_ARCH_FLAGS -march=native)
  endif()
endif()

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

# Sanitizers for every target (library, tests, programs): ZDL_SANITIZE=address,undefined or
# thread. UB aborts (-fno-sanitize-recover) so a finding fails its test instead of printing
# and passing; frame pointers and line tables keep the reports' stacks whole. C++ only: nvcc
# takes none of these flags. The runtime options (LSan
# suppressions for third-party frames) are set by the tests (tests/CMakeLists.txt).
set(ZDL_SANITIZE "" CACHE STRING "Sanitizers for all targets, e.g. address,undefined or thread (empty: none)")
if(ZDL_SANITIZE)
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${ZDL_SANITIZE};-fno-omit-frame-pointer;-gline-tables-only>")
  add_link_options(-fsanitize=${ZDL_SANITIZE})
  if(ZDL_SANITIZE MATCHES "undefined")
    add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=undefined>")
  endif()
  message(STATUS "zerodl: sanitizers ${ZDL_SANITIZE}")
endif()

# libFuzzer targets (tests/fuzz/): with ZDL_FUZZ=ON only the fuzzers and the library are
# meant to be built (the library with -fsanitize=fuzzer-no-link,address,undefined so its code
# is instrumented for coverage and UB aborts; each fuzzer links -fsanitize=fuzzer). clang only.
option(ZDL_FUZZ "Build the libFuzzer targets in tests/fuzz (clang)" OFF)
if(ZDL_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "ZDL_FUZZ=ON needs clang (libFuzzer); configure with -DCMAKE_CXX_COMPILER=clang++")
  endif()
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link,address,undefined;-fno-sanitize-recover=undefined;-fno-omit-frame-pointer;-gline-tables-only>")
  add_link_options(-fsanitize=address,undefined)
  message(STATUS "zerodl: fuzz build (libFuzzer + ASan + UBSan)")
endif()

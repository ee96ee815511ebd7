# Build options shared by every target.
option(ZDL_BUILD_TESTS "Build the GoogleTest suite" ON)
option(ZDL_NCCL "CUDA builds: use NCCL for multi-GPU collectives when it is found" ON)
option(ZDL_NATIVE "Optimize for the building machine's CPU (-march=native)" ON)

set(ZDL_WARNINGS -Wall -Wextra -Wno-unused-parameter)
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  # `#pragma omp simd` on a loop that calls a libm function (exp, tanh: no vector variant
  # without a vector math library) is left scalar, and clang says so for every instantiation.
  list(APPEND ZDL_WARNINGS -Wno-pass-failed)
endif()
# Math functions need not set errno: zerodl never reads it after one, and with errno the
# compiler must keep a scalar call to sqrtf for a negative argument, which left AdamW's update
# (and 28 other `omp simd` loops) unvectorized. sqrt is exact either way, so no result changes.
set(ZDL_MATH_FLAGS -fno-math-errno)
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
# takes none of these flags. The runtime options (ASAN/UBSAN/LSAN/TSAN_OPTIONS, suppressions
# for third-party frames in tests/sanitizers/) are set by scripts/test.sh.
#
# Sanitized and fuzz builds are for checking, not for speed: they compile at ZDL_SANITIZE_OPT
# (-O1, as OSS-Fuzz does), which is placed after the build type's -O3 and so wins. Measured on
# 2 cores: instrumented objects compile 15-20% faster than at -O3, stacks keep more frames
# (less inlining), and the whole CPU suite still runs in under a minute under ASan+UBSan.
set(ZDL_SANITIZE "" CACHE STRING "Sanitizers for all targets, e.g. address,undefined or thread (empty: none)")
set(ZDL_SANITIZE_OPT "-O1" CACHE STRING "Optimization flag of ZDL_SANITIZE and ZDL_FUZZ builds (empty: the build type's)")
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  set(zdl_line_tables -gline-tables-only)
else()
  set(zdl_line_tables -g1)
endif()
if(ZDL_SANITIZE AND ZDL_FUZZ)
  message(FATAL_ERROR "ZDL_FUZZ=ON brings its own sanitizers (address,undefined); leave ZDL_SANITIZE empty")
endif()
if(ZDL_SANITIZE)
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${ZDL_SANITIZE};-fno-omit-frame-pointer;${zdl_line_tables};${ZDL_SANITIZE_OPT}>")
  add_link_options(-fsanitize=${ZDL_SANITIZE})
  if(ZDL_SANITIZE MATCHES "undefined")
    add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=undefined>")
  endif()
  # libstdc++'s bounds checks (vector/string/span operator[], front/back on empty, ...): an index
  # past size() but within capacity is invisible to ASan. No ABI change, so prebuilt GoogleTest
  # links as usual.
  if(ZDL_SANITIZE MATCHES "address")
    add_compile_definitions("$<$<COMPILE_LANGUAGE:CXX>:_GLIBCXX_ASSERTIONS>")
  endif()
  message(STATUS "zerodl: sanitizers ${ZDL_SANITIZE} (${ZDL_SANITIZE_OPT})")
endif()

# libFuzzer targets (tests/fuzz/): with ZDL_FUZZ=ON only the fuzzers and the library are
# meant to be built (the library with -fsanitize=fuzzer-no-link,address,undefined so its code
# is instrumented for coverage and UB aborts; each fuzzer links -fsanitize=fuzzer). clang only.
option(ZDL_FUZZ "Build the libFuzzer targets in tests/fuzz (clang)" OFF)
if(ZDL_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "ZDL_FUZZ=ON needs clang (libFuzzer); configure with -DCMAKE_CXX_COMPILER=clang++")
  endif()
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link,address,undefined;-fno-sanitize-recover=undefined;-fno-omit-frame-pointer;-gline-tables-only;${ZDL_SANITIZE_OPT}>")
  add_compile_definitions("$<$<COMPILE_LANGUAGE:CXX>:_GLIBCXX_ASSERTIONS>")
  add_link_options(-fsanitize=address,undefined)
  message(STATUS "zerodl: fuzz build (libFuzzer + ASan + UBSan, ${ZDL_SANITIZE_OPT})")
endif()

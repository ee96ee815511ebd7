# CPU GEMM back end: oneDNN's JIT sgemm (Debian's libdnnl-dev, which scripts/setup.sh installs)
# when it is found, else Eigen's. Measured on AVX2 and AVX-512 code paths, oneDNN's single-
# threaded sgemm is 5-10% faster than Eigen's on a training step's shapes (docs/cpu_performance.md);
# Eigen stays the fallback and the f64 path. On CPUs with AVX512-BF16 or AMX, bf16 products run
# on oneDNN's bf16 GEMM too (f32 sums). Included from CMakeLists.txt after add_library(zdl).
#   -DZDL_ONEDNN=OFF  builds with Eigen only; ZDL_CPU_GEMM=eigen picks Eigen at run time.
option(ZDL_ONEDNN "Use oneDNN's sgemm for f32 CPU matrix products when it is found" ON)
find_path(DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.h ENV DNNL_ROOT PATH_SUFFIXES include)
find_library(DNNL_LIBRARY dnnl ENV DNNL_ROOT PATH_SUFFIXES lib lib64)
if(ZDL_ONEDNN AND DNNL_INCLUDE_DIR AND DNNL_LIBRARY)
  target_compile_definitions(zdl PRIVATE ZDL_WITH_ONEDNN=1)
  target_include_directories(zdl PRIVATE ${DNNL_INCLUDE_DIR})
  # Private: only kernels/cpu/matmul.cpp calls it; an installed libzdl.a names the library file.
  target_link_libraries(zdl PRIVATE ${DNNL_LIBRARY})
  # bf16 x bf16 -> f32 GEMM: exported by oneDNN (1.x to 3.x) but declared only in its own tests,
  # so kernels/cpu/matmul.cpp declares it and the build checks that it links.
  include(CheckCXXSourceCompiles)
  set(CMAKE_REQUIRED_LIBRARIES ${DNNL_LIBRARY})
  set(CMAKE_REQUIRED_INCLUDES ${DNNL_INCLUDE_DIR})
  check_cxx_source_compiles([[
    #include <oneapi/dnnl/dnnl.h>
    extern "C" dnnl_status_t dnnl_gemm_bf16bf16f32(char, char, dnnl_dim_t, dnnl_dim_t, dnnl_dim_t, float,
        const unsigned short*, dnnl_dim_t, const unsigned short*, dnnl_dim_t, float, float*, dnnl_dim_t);
    int main() { return dnnl_gemm_bf16bf16f32('N', 'N', 0, 0, 0, 1.f, nullptr, 1, nullptr, 1, 0.f, nullptr, 1); }
  ]] ZDL_ONEDNN_HAS_BF16_GEMM)
  unset(CMAKE_REQUIRED_LIBRARIES)
  unset(CMAKE_REQUIRED_INCLUDES)
  if(ZDL_ONEDNN_HAS_BF16_GEMM)
    target_compile_definitions(zdl PRIVATE ZDL_WITH_ONEDNN_BF16=1)
  endif()
  message(STATUS "zerodl: CPU GEMM on oneDNN (${DNNL_LIBRARY}; bf16 GEMM: ${ZDL_ONEDNN_HAS_BF16_GEMM})")
else()
  message(STATUS "zerodl: CPU GEMM on Eigen (ZDL_ONEDNN=${ZDL_ONEDNN}, oneDNN: ${DNNL_LIBRARY}; "
                 "scripts/setup.sh installs libdnnl-dev)")
endif()

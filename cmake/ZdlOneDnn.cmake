# CPU GEMM back end: oneDNN's JIT sgemm (Debian's libdnnl-dev, which scripts/setup.sh installs)
# when it is found, else Eigen's. Measured on AVX2 and AVX-512 code paths, oneDNN's single-
# threaded sgemm is 5-10% faster than Eigen's on a training step's shapes (docs/cpu_performance.md);
# Eigen stays the fallback and the f64 path. Included from CMakeLists.txt after add_library(zdl).
#   -DZDL_ONEDNN=OFF  builds with Eigen only; ZDL_CPU_GEMM=eigen picks Eigen at run time.
option(ZDL_ONEDNN "Use oneDNN's sgemm for f32 CPU matrix products when it is found" ON)
find_path(DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.h ENV DNNL_ROOT PATH_SUFFIXES include)
find_library(DNNL_LIBRARY dnnl ENV DNNL_ROOT PATH_SUFFIXES lib lib64)
if(ZDL_ONEDNN AND DNNL_INCLUDE_DIR AND DNNL_LIBRARY)
  target_compile_definitions(zdl PRIVATE ZDL_WITH_ONEDNN=1)
  target_include_directories(zdl PRIVATE ${DNNL_INCLUDE_DIR})
  # Private: only kernels/cpu/matmul.cpp calls it; an installed libzdl.a names the library file.
  target_link_libraries(zdl PRIVATE ${DNNL_LIBRARY})
  message(STATUS "zerodl: CPU GEMM on oneDNN (${DNNL_LIBRARY})")
else()
  message(STATUS "zerodl: CPU GEMM on Eigen (ZDL_ONEDNN=${ZDL_ONEDNN}, oneDNN: ${DNNL_LIBRARY}; "
                 "scripts/setup.sh installs libdnnl-dev)")
endif()

# CUDA builds: cuDNN's fused attention (kernels/cuda/cudnn_attention.cpp) when cuDNN 9 and the
# header-only cuDNN frontend are both found; otherwise attention runs on zerodl's own kernels
# and the configure output says why. Included from CMakeLists.txt inside if(ZDL_CUDA).
#   cuDNN: next to the toolkit, or under CUDNN_ROOT / CUDNN_PATH (e.g. pip's nvidia-cudnn-cu* wheels).
#   frontend: ZDL_CUDNN_FRONTEND_DIR (the folder holding cudnn_frontend.h); found by default in
#          third_party/cudnn_frontend/include (scripts/setup.sh fetches it) or $CUDNN_FRONTEND_INCLUDE_DIR.
option(ZDL_CUDNN "CUDA builds: use cuDNN's fused attention when cuDNN and its frontend are found" ON)
find_path(CUDNN_INCLUDE_DIR cudnn_version.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV CUDNN_ROOT ENV CUDNN_PATH
          PATH_SUFFIXES include)
find_library(CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} ENV CUDNN_ROOT ENV CUDNN_PATH PATH_SUFFIXES lib lib64)
find_path(ZDL_CUDNN_FRONTEND_DIR cudnn_frontend.h
          HINTS ${CMAKE_CURRENT_SOURCE_DIR}/third_party/cudnn_frontend/include ENV CUDNN_FRONTEND_INCLUDE_DIR
          DOC "Folder holding the cuDNN frontend's cudnn_frontend.h")

# Versions from the headers: cuDNN 9 (SDPA with f32 statistics and a deterministic backward),
# frontend 1.23 or newer (the graph API used here: set_generate_stats, diagonal-band masks).
set(zdl_cudnn_version "")
if(CUDNN_INCLUDE_DIR)
  file(STRINGS ${CUDNN_INCLUDE_DIR}/cudnn_version.h zdl_lines REGEX "^#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ")
  string(REGEX REPLACE ".*CUDNN_MAJOR ([0-9]+).*CUDNN_MINOR ([0-9]+).*CUDNN_PATCHLEVEL ([0-9]+).*" "\\1.\\2.\\3"
         zdl_cudnn_version "${zdl_lines}")
endif()
set(zdl_cfe_version "")
if(ZDL_CUDNN_FRONTEND_DIR AND EXISTS ${ZDL_CUDNN_FRONTEND_DIR}/cudnn_frontend_version.h)
  file(STRINGS ${ZDL_CUDNN_FRONTEND_DIR}/cudnn_frontend_version.h zdl_lines
       REGEX "^#define CUDNN_FRONTEND_(MAJOR|MINOR|PATCH)_VERSION ")
  string(REGEX REPLACE ".*MAJOR_VERSION ([0-9]+).*MINOR_VERSION ([0-9]+).*PATCH_VERSION ([0-9]+).*" "\\1.\\2.\\3"
         zdl_cfe_version "${zdl_lines}")
endif()

if(NOT ZDL_CUDNN)
  set(zdl_cudnn_missing "ZDL_CUDNN=OFF")
elseif(NOT CUDNN_LIBRARY OR zdl_cudnn_version VERSION_LESS 9)
  set(zdl_cudnn_missing "no cuDNN 9 (cudnn_version.h: ${CUDNN_INCLUDE_DIR}, libcudnn: ${CUDNN_LIBRARY})")
elseif(NOT CUDA_nvrtc_LIBRARY)
  set(zdl_cudnn_missing "no NVRTC in the toolkit (the frontend links it)")
elseif(zdl_cfe_version VERSION_LESS 1.23)
  set(zdl_cudnn_missing
      "no cuDNN frontend 1.23+ (ZDL_CUDNN_FRONTEND_DIR=${ZDL_CUDNN_FRONTEND_DIR}; scripts/setup.sh fetches it)")
else()
  set(zdl_cudnn_missing "")
endif()

set(ZDL_HAS_CUDNN_ATTENTION OFF)  # for bench/: whether the cuDNN path is built
if(zdl_cudnn_missing)
  list(REMOVE_ITEM ZDL_CUDA_SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/kernels/cuda/cudnn_attention.cpp)
  message(STATUS "zerodl: no cuDNN attention (${zdl_cudnn_missing}): attention runs on zerodl's CUDA kernels")
else()
  set(ZDL_HAS_CUDNN_ATTENTION ON)
  target_compile_definitions(zdl PUBLIC ZDL_WITH_CUDNN_FRONTEND=1)
  # SYSTEM: the frontend's own warnings are not ours to fix.
  target_include_directories(zdl SYSTEM PRIVATE ${ZDL_CUDNN_FRONTEND_DIR} ${CUDNN_INCLUDE_DIR})
  # NVRTC: the frontend's own experimental engines compile kernels at runtime. The library, not
  # CUDA::nvrtc, which brings the driver (libcuda.so.1) that a machine without a GPU lacks.
  target_link_libraries(zdl PRIVATE ${CUDNN_LIBRARY} ${CUDA_nvrtc_LIBRARY})
  message(STATUS "zerodl: cuDNN attention: cuDNN ${zdl_cudnn_version} (${CUDNN_LIBRARY}), "
                 "frontend ${zdl_cfe_version} (${ZDL_CUDNN_FRONTEND_DIR})")
endif()

# ZDL_CUDA: on by default when a CUDA toolkit is found (nvcc on PATH or in /usr/local/cuda).
# The CUDA code must compile and link even on machines without a GPU; tests skip at run time.
if(NOT DEFINED ZDL_CUDA)
  find_program(ZDL_NVCC nvcc HINTS /usr/local/cuda/bin ENV CUDA_HOME PATH_SUFFIXES bin)
  if(ZDL_NVCC)
    set(ZDL_CUDA_DEFAULT ON)
  else()
    set(ZDL_CUDA_DEFAULT OFF)
  endif()
endif()
option(ZDL_CUDA "Build the CUDA backend" ${ZDL_CUDA_DEFAULT})

if(ZDL_CUDA)
  if(NOT CMAKE_CUDA_COMPILER AND ZDL_NVCC)
    set(CMAKE_CUDA_COMPILER ${ZDL_NVCC})
  endif()
  # Hopper (H100/H200) by default; override with -DCMAKE_CUDA_ARCHITECTURES=...
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90)
  endif()
  enable_language(CUDA)
  # CMake 3.25 knows nvcc flags only up to C++17; .cu files include only C++17-clean headers.
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)
  message(STATUS "zerodl: CUDA backend ON (toolkit ${CUDAToolkit_VERSION}, archs ${CMAKE_CUDA_ARCHITECTURES})")
else()
  message(STATUS "zerodl: CUDA backend OFF")
endif()

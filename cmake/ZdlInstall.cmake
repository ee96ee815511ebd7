# `cmake --install BUILD --prefix P` puts the library, its headers and a CMake package under P:
#   P/lib/libzdl.a, P/include/zerodl/{core,autograd,nn,...}/*.h, P/lib/cmake/zerodl/
# so that a project elsewhere does  find_package(zerodl REQUIRED)  and links  zerodl::zdl
# (examples/find_package/ is one; tests/package/ builds and runs it against an installed tree).
# Only the library is installed: the programs stay in the build folder.
include(CMakePackageConfigHelpers)
include(GNUInstallDirs)

set(ZDL_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/zerodl)
install(TARGETS zdl EXPORT zerodlTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
# Every public header, by folder; .cuh files are private to the CUDA kernels.
install(DIRECTORY core autograd nn optim dist data io kernels
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/zerodl
        FILES_MATCHING PATTERN "*.h")
install(EXPORT zerodlTargets NAMESPACE zerodl:: DESTINATION ${ZDL_INSTALL_CMAKEDIR})

# What the config file needs to know about this build: the OpenMP runtime libzdl.a calls into
# (CMakeLists.txt exports OpenMP::OpenMP_CXX only to targets built here: a project would resolve
# it with its own compiler, and g++'s libgomp lacks clang's __kmpc_*), and whether CUDA is in it.
set(ZDL_OPENMP_LIBRARIES ${OpenMP_CXX_LIBRARIES})
set(ZDL_BUILT_WITH_CUDA ${ZDL_CUDA})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/zerodlConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/zerodlConfig.cmake
                              INSTALL_DESTINATION ${ZDL_INSTALL_CMAKEDIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/zerodlConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/zerodlConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/zerodlConfigVersion.cmake
        DESTINATION ${ZDL_INSTALL_CMAKEDIR})

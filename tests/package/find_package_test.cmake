# Installs zerodl from BUILD into a fresh prefix, builds examples/find_package/ (a project of
# its own that only knows find_package(zerodl)) against that prefix, and runs it on 1, 2 and 4
# ranks: every run learns and prints the same losses.
#   cmake -DBUILD=... -DSOURCE=... -DWORK=... -DCXX=... -DGENERATOR=... -DMPIEXEC=... [-DPREFLAGS=...]
#         -P find_package_test.cmake
file(REMOVE_RECURSE ${WORK})
function(run what)
  execute_process(COMMAND ${ARGN} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (exit ${rc}):\n${out}\n${err}")
  endif()
  message(STATUS "${what}: ok")
endfunction()
run("install" ${CMAKE_COMMAND} --install ${BUILD} --prefix ${WORK}/prefix)
foreach(f lib/libzdl.a lib/cmake/zerodl/zerodlConfig.cmake include/zerodl/dist/zero/trainer.h include/zerodl/core/tensor.h)
  if(NOT EXISTS ${WORK}/prefix/${f})
    message(FATAL_ERROR "the installed tree lacks ${f}")
  endif()
endforeach()
# The project is configured with nothing of zerodl's build but the prefix.
run("configure the project" ${CMAKE_COMMAND} -S ${SOURCE}/examples/find_package -B ${WORK}/app -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${WORK}/prefix -DCMAKE_CXX_COMPILER=${CXX})
run("build the project" ${CMAKE_COMMAND} --build ${WORK}/app)
set(EXE ${WORK}/app/next_char)
include(${SOURCE}/tests/examples/same_output_at_any_world_size.cmake)

# A project that compiles with another compiler family is refused at configure time, saying which.
if(CXX MATCHES "clang")
  find_program(other g++)
else()
  find_program(other clang++)
endif()
if(other)
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE}/examples/find_package -B ${WORK}/other -G ${GENERATOR}
                          -DCMAKE_PREFIX_PATH=${WORK}/prefix -DCMAKE_CXX_COMPILER=${other}
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(rc EQUAL 0 OR NOT err MATCHES "zerodl was built with")
    message(FATAL_ERROR "configuring with ${other} should fail naming the compiler zerodl was built with:\n${out}\n${err}")
  endif()
  message(STATUS "another compiler is refused: ok")
endif()
file(REMOVE_RECURSE ${WORK})

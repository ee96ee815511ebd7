# Installs zerodl from BUILD into a fresh prefix, builds examples/find_package/ (a project of
# its own that only knows find_package(zerodl)) against that prefix twice, with the compiler
# that built zerodl and with the other of g++ and clang++, and runs each build on 1, 2 and 4
# ranks: every run learns and prints the same losses.
#   cmake -DBUILD=... -DSOURCE=... -DWORK=... -DCXX=... -DCXX_ID=... -DGENERATOR=... -DMPIEXEC=...
#         [-DPREFLAGS=...] -P find_package_test.cmake
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

# libzdl.a calls its own compiler's OpenMP runtime: a project compiled by the other family
# must link and run all the same.
if(CXX_ID STREQUAL "GNU")
  set(other_name clang++)
else()
  set(other_name g++)
endif()
find_program(other ${other_name})
if(NOT other)
  message(FATAL_ERROR "${other_name} is not on PATH: this test builds the project with it too (scripts/setup.sh installs it)")
endif()
foreach(cxx ${CXX} ${other})
  get_filename_component(name ${cxx} NAME)
  # The project is configured with nothing of zerodl's build but the prefix.
  run("configure the project with ${name}" ${CMAKE_COMMAND} -S ${SOURCE}/examples/find_package -B ${WORK}/${name}
      -G ${GENERATOR} -DCMAKE_PREFIX_PATH=${WORK}/prefix -DCMAKE_CXX_COMPILER=${cxx})
  run("build the project with ${name}" ${CMAKE_COMMAND} --build ${WORK}/${name})
  set(EXE ${WORK}/${name}/next_char)
  include(${SOURCE}/tests/examples/same_output_at_any_world_size.cmake)
endforeach()
file(REMOVE_RECURSE ${WORK})

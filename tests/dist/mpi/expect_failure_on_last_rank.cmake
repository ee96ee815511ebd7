# The MPI test harness's own proof: a test that fails on the last rank only must fail the job
# (nonzero exit) and show that rank's message, although rank 0 passes.
# cmake -DEXE=test_dist_mpi -DMPIEXEC=... -DNP=2 [-DPREFLAGS=...] -P expect_failure_on_last_rank.cmake
execute_process(COMMAND ${MPIEXEC} -n ${NP} ${PREFLAGS} ${EXE} --expect-world-size=${NP}
                        --gtest_also_run_disabled_tests --gtest_filter=MpiTestHarness.DISABLED_FailsOnLastRank
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
message(STATUS "exit ${rc}\n${out}\n${err}")
if(rc EQUAL 0)
  message(FATAL_ERROR "the job exited 0 although its last rank failed a test: the harness hides failures")
endif()
if(NOT "${out}${err}" MATCHES "deliberate failure on the last rank")
  message(FATAL_ERROR "the job failed, but not with the last rank's test failure (exit ${rc})")
endif()
if(NOT "${out}" MATCHES "Running 1 test")
  message(FATAL_ERROR "the harness test did not run")
endif()

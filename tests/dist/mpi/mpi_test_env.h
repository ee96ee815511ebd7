// Shared state of the multi-rank test binary (test_dist_mpi, run by ctest under mpirun): the
// world communicator every test uses, created once by the test main.
//
// Every rank runs every test, and every rank must issue the same collectives in the same
// order: keep rank-dependent control flow symmetric (EXPECT rather than ASSERT around
// collectives), or a failing rank desynchronizes the others (they then stop on the watchdog).
#pragma once
#include <memory>

#include "dist/comm/communicator.h"

namespace zdl::dist::testing {

Communicator& world();

}  // namespace zdl::dist::testing

// Checks for MPI calls: a failure throws zdl::Error with the call, file:line and MPI's error
// string. Needs MPI_ERRORS_RETURN on the communicator (the default handler aborts first);
// MpiCommunicator sets it on its own communicator.
#pragma once
#include <mpi.h>

#include <string>

#include "core/check.h"

namespace zdl::dist {

inline std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error code " + std::to_string(code);
  return std::string(buf, static_cast<size_t>(len));
}

}  // namespace zdl::dist

#define ZDL_MPI_CHECK(call)                                                                          \
  do {                                                                                               \
    int zdl_mpi_err_ = (call);                                                                       \
    if (zdl_mpi_err_ != MPI_SUCCESS)                                                                 \
      ::zdl::detail::throw_error(__FILE__, __LINE__, #call,                                          \
                                 ::zdl::detail::str("MPI error: ", ::zdl::dist::mpi_error_string(zdl_mpi_err_))); \
  } while (0)

#pragma once
// Turns an MPI return code into an Error naming the call (communicators use MPI_ERRORS_RETURN).
#include <mpi.h>

#include <string>

#include "core/error.hpp"

namespace rrfp {

inline void mpi_check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(std::string("mpi: ") + call + " failed: " + std::string(text, len));
}

}  // namespace rrfp

#pragma once
// Whether Open MPI's mpirun started this process, as its environment says: read by each layer
// that acts otherwise under mpirun (a terminal's progress lines in core, the MPI world, the
// command line's refusals), from one place.
#include <algorithm>
#include <cstdlib>

namespace rrfp {

// True when this process was started by mpirun (Open MPI sets OMPI_COMM_WORLD_SIZE).
inline bool launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr;
}

// The job's size mpirun gives (mpirun -np), before MPI is started; 0 where it gives none.
inline int mpirun_world_size() {
  const char* n = std::getenv("OMPI_COMM_WORLD_SIZE");
  return n != nullptr ? std::max(0, std::atoi(n)) : 0;
}

}  // namespace rrfp

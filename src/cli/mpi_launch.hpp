#pragma once
// `--transport mpi`: the command runs as one process of an mpirun job. Bad input, which every
// process reads alike, is printed once (by rank 0) and ends every process with exit code 2; any
// other error is printed with the rank that hit it and ends the whole job (MPI_Abort), so no
// process is left waiting for a dead peer and mpirun exits non-zero. `timeout_ms` (the run's
// --timeout) bounds every wait for the other processes outside a step: start-up, barriers,
// gathers and shutdown (MpiWorldOptions).
#include <cstdint>
#include <functional>

#include "dist/job.hpp"

namespace rrfp {

void run_as_mpi_process(std::int64_t timeout_ms, const std::function<void(Job&)>& body);

}  // namespace rrfp

#pragma once
// `--transport mpi`: the command runs as one process of an mpirun job. Bad input, which every
// process reads alike, is printed once (by rank 0) and ends every process with exit code 2; any
// other error is printed with the rank that hit it and ends the whole job (MPI_Abort), so no
// process is left waiting for a dead peer and mpirun exits non-zero. `timeout_ms` (the run's
// --timeout) bounds every wait for the other processes outside a step: start-up, barriers,
// gathers and shutdown (MpiWorldOptions).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dist/job.hpp"

namespace rrfp {

void run_as_mpi_process(std::int64_t timeout_ms, const std::function<void(Job&)>& body);

// `--transport inproc` (the default) in a process of an mpirun job of several: each process
// ran the whole job in its threads, N runs where one was meant, each timed while the others
// took the cores (train's wrote one output folder from every process). Throws InputError
// naming --transport mpi.
void refuse_inproc_under_mpirun();

// An input file that every process reads for itself: its flag and path ("": not given).
struct InputFile {
  std::string flag, path;
};
using InputFiles = std::vector<InputFile>;

// The command lines are compared, not the files they name: processes that read different bytes
// under one path (another hint file in each working folder, on each node) ran different
// schedules or durations, and the run was reported as one. A collective: throws InputError on
// every process where any file's bytes differ between them, naming its flag and the ranks. A
// file a process cannot read is left to its reader, which refuses it in its own words.
void refuse_other_input_files(Job& job, const InputFiles& files);

}  // namespace rrfp

#pragma once
// A Job whose "processes" are threads of this process (after Gloo's threads-as-ranks test
// harness): every rank of a PP x TP x DP layout runs in its own thread with its own Job
// object, and they share in-process transports, TP groups and an in-memory exchange. It is
// the in-process equivalent of an mpirun job, so a multi-process run can be checked against it
// bit for bit, and the layouts can be tested under the sanitizers without MPI.
#include <memory>

#include "dist/job.hpp"

namespace rrfp {

// Makes the `world` ranks' Job objects; rank i's is element i. Each is used by one thread.
std::vector<std::unique_ptr<Job>> make_local_jobs(int world);

}  // namespace rrfp

#pragma once
// `rrfp run`'s flags and the runs they ask for (cli/run_emulated.cpp), shared with the
// subcommand's set-up (cli/run_cmd.cpp).
#include <string>

#include "cli/experiment_cmd.hpp"
#include "dist/job.hpp"

namespace rrfp {

struct RunFlags {
  ExperimentFlags exp;
  double timeout_s = 60;
  int warmup = 1, warmup_extra = 4, repeat = 1, rounds = 1;
  int idle_spin_us = 0;  // RuntimeOptions::idle_spin_us
  bool spin = false, compare = false;
  TransportKind transport = TransportKind::Inproc;
  std::string calibration, rendezvous = "offer";
};

// The scenario of the flags, checked before anything runs: the outputs where they are written
// (rank 0 of a job writes every report), the workload, the job's size or, in one process, what
// the threaded runtime can emulate, and the memory the runs take. `world`: as for run_emulated.
Scenario emulable_scenario(const RunFlags& f, Job* world);

// Runs the experiments on the threaded runtime with emulated compute and reports them.
// `world`: the MPI job under --transport mpi (each process hosts one endpoint; rank 0 merges
// every process's record and writes the reports), else null.
void run_emulated(const RunFlags& f, Job* world);

}  // namespace rrfp

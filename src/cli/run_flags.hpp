#pragma once
// `rrfp run`'s flags and the runs they ask for (cli/run_emulated.cpp), shared with the
// subcommand's set-up (cli/run_cmd.cpp).
#include <string>
#include <vector>

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

// Refuses (InputError) a task (with its TP collective), or in one process a message, of the
// scenario's runs that lasts `timeout_ms` or longer, naming the longest: the watchdog would take
// its modelled sleep for a stall. `given_s`: --timeout as given, for the message. `longest_s`:
// the longest simulated step of the runs (nothing lasts longer: below the timeout, nothing is
// drawn again). `source`: what decides the durations, named in the message.
void refuse_work_past_timeout(const Scenario& sc, const std::vector<RunSpec>& specs,
                              std::int64_t timeout_ms, double given_s, double longest_s,
                              bool messages, const std::string& source);

// Runs the experiments on the threaded runtime with emulated compute and reports them.
// `world`: the MPI job under --transport mpi (each process hosts one endpoint; rank 0 merges
// every process's record and writes the reports), else null.
void run_emulated(const RunFlags& f, Job* world);

}  // namespace rrfp

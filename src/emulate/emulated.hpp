#pragma once
// Emulated compute: stage programs that take exactly the workload model's duration for each
// task (sleeping, or busy-waiting with `spin`) and produce payloads of the modelled size, so
// the runtime can be run, measured and compared with the simulator without a model. Outputs
// come from a pool, obtained at the task's start, so making them is part of the task's time.
#include "runtime/program.hpp"
#include "runtime/stage.hpp"
#include "sim/workload.hpp"

namespace rrfp {

struct EmulationOptions {
  bool spin = false;  // busy-wait instead of sleeping (exact, but one core per rank)
  // Outputs leave the process (a transport copies their bytes): a new output buffer has its
  // pages written within the task's time, so the first send of each pooled buffer does not
  // page-fault inside the transfer, where the faults would be charged to the message
  // (measured: docs/design-decisions.md, "Processes (Open MPI)").
  bool touch_outputs = false;
};

// The work and model must outlive the programs.
ProgramFactory emulated_programs(const WorkModel& m, const RealizedWork& w,
                                 EmulationOptions opt = {});
// The modelled message latency of every cross-stage output.
LatencyFn emulated_latency(const WorkModel& m, const RealizedWork& w);

}  // namespace rrfp

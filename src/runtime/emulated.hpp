#pragma once
// Emulated compute: stage programs that take exactly the workload model's duration for each
// task (sleeping, or busy-waiting with `spin`) and produce payloads of the modelled size, so
// the runtime can be run, measured and compared with the simulator without a model.
#include "runtime/program.hpp"
#include "runtime/stage.hpp"
#include "sim/workload.hpp"

namespace rrfp {

struct EmulationOptions {
  bool spin = false;  // busy-wait instead of sleeping (exact, but one core per rank)
};

// The work and model must outlive the programs.
ProgramFactory emulated_programs(const WorkModel& m, const RealizedWork& w,
                                 EmulationOptions opt = {});
// The modelled message latency of every cross-stage output.
LatencyFn emulated_latency(const WorkModel& m, const RealizedWork& w);

}  // namespace rrfp

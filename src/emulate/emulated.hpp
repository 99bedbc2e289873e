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
  // Outputs of each kind (F, B) a stage may hold at once: its pool maps their buffers when the
  // program is made, and no step maps any. d_bound() of the run's arbiter options bounds them:
  // an F's output lives until its consumer's F has run, and its own B cannot run before that;
  // a B's output lives until its consumer's B has run, whose F had run. Either way each output
  // out is a microbatch counted in one stage's D. 0: none ahead, the pool maps what the steps
  // ask for.
  int outputs_in_flight = 0;
};

// The buffers the pool of `stage`'s programs maps ahead for `opt.outputs_in_flight`, as
// (capacity, count) by capacity: per size, the outputs of that size of each kind, at most
// outputs_in_flight of each. A request takes its own size first, so these suffice.
std::vector<std::pair<std::size_t, int>> buffers_ahead(const WorkModel& m, const RealizedWork& w,
                                                       int stage, const EmulationOptions& opt);

// The work and model must outlive the programs: temporaries are refused at compile time (a
// factory of a temporary's work ran a step of freed durations, 2-5 ms for 425, exit 0).
ProgramFactory emulated_programs(const WorkModel& m, const RealizedWork& w,
                                 EmulationOptions opt = {});
ProgramFactory emulated_programs(const WorkModel&&, const RealizedWork&,
                                 EmulationOptions = {}) = delete;
ProgramFactory emulated_programs(const WorkModel&, const RealizedWork&&,
                                 EmulationOptions = {}) = delete;
// The modelled message latency of every cross-stage output; the same lifetimes.
LatencyFn emulated_latency(const WorkModel& m, const RealizedWork& w);
LatencyFn emulated_latency(const WorkModel&&, const RealizedWork&) = delete;
LatencyFn emulated_latency(const WorkModel&, const RealizedWork&&) = delete;

}  // namespace rrfp

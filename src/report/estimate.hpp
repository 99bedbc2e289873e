#pragma once
// Memory and time a run will need, estimated before it starts from the number of tasks it
// holds: a run bigger than the machine's available memory is refused at once (exit 2, with the
// estimate and what the machine has) instead of swapping or being killed an hour later; a
// large one that fits says what it will take on a terminal before it starts.
#include <cstdint>
#include <string>

#include "core/modes.hpp"
#include "core/work_model.hpp"

namespace rrfp {

// Bytes and seconds per task of each command, measured on the reference VM (2-core AMD EPYC,
// Release; docs/reliability.md): the marginal cost between a run of 0.5M and one of 2M tasks,
// rounded up.
struct TaskCost {
  double bytes;    // held at the peak, per task (per task and TP rank for simulated runs)
  double seconds;  // of work per task
};
// A simulated run of a rule hint with async messages, no records kept; other runs hold more
// (extra_bytes in experiment_cmd.cpp).
inline constexpr TaskCost kSimulateCost{45, 0.8e-6};
inline constexpr TaskCost kSvgCost{320, 3e-6};  // ... its records drawn as an SVG
// ... and as a Chrome trace: the default comparison at P=M=512 (2.36M tasks in its four runs)
// peaked at 388 bytes a task resident and 520 of address space, a fixed blocking run alone at
// 450 and 520; at 350 it passed a 1.2 GB `ulimit -v` and ran out 11 s later. One run that does
// not block holds less (ready BF 222 and 208, BFW 293 and 340): kTraceOneRunCost.
inline constexpr TaskCost kTraceCost{520, 8e-6};
inline constexpr TaskCost kTraceOneRunCost{350, 8e-6};
inline constexpr TaskCost kScheduleCost{160, 0.8e-6};  // `schedule show`: the order and its diagram
inline constexpr TaskCost kPlanCost{190, 1.5e-6};      // `plan`: graph, orders, per evaluation
// `predict`, its step imported and its predictions kept (the default three hints), beside what
// parsing the trace takes (checked as it is parsed): 332 bytes a task held after the predictions
// between 65K and 262K tasks, with room for a simulation's own. The time is the predictions',
// said once the trace is read: 0.28 s at 262K tasks and 1.6 s at 1.28M (1.2-1.3 us a task,
// twice that here); at 1.2e-4 a 1.28M-task trace was announced as 3 min of work, done in 1.6 s.
inline constexpr TaskCost kPredictCost{400, 2.5e-6};

// What a stage and TP rank of a simulated run holds beside its tasks (its rank driver, arbiter
// and readiness counters, the work model's row): 1.47 KB measured at M=1 (`rrfp simulate
// --hint bf` at P=100K against 200K), rounded up. Estimated at its tasks alone, a run of many
// stages and few microbatches passed the check and ran out of memory (P=50M, M=1: 4.5 GB
// estimated, about 70 GB needed).
inline constexpr double kStageBytes = 1500;
// ... and of a plan (its graph's and search's share of each stage too): 1.19 KB a stage at M=1
// (`rrfp plan --max-evaluations 1`, P=100K against 400K) and 1.56 KB a stage and TP rank at
// TP 4 (P=200K), rounded up.
inline constexpr double kPlanStageBytes = 1700;

// A task's record (TaskRecord), kept where a run's records are, with the growth of the vector
// holding them: Python's rrfp.simulate held 119 bytes a task in all (137 of address space) at
// P=512, M=4096, TP=16, where 64 here estimated 109, and a run sized to the limit passed the
// check to fail with std::bad_alloc 26 s later. A fifth over the address space.
inline constexpr double kRecordBytes = 120;
// A task's tuple in the lists Python's rrfp.schedule returns, beside kScheduleCost: 194 bytes a
// task in all at P=512, M=8192 (203 of address space) against 160 estimated. A fifth over.
inline constexpr double kScheduleTupleBytes = 80;
// A task's tuple in Python's StepRecord.tasks, built on each access: about 190 bytes measured
// at 1M tasks, with a fifth's room.
inline constexpr double kTaskTupleBytes = 230;

// `cost` a task and TP rank of a simulated run under `protocol`. An agree round sends each
// rank's proposal to every other: a task's events grow as T^2 where a leader's grow as T. P=8
// M=32 ready BF at T=512 took 41.7 s and 185 MB (0.3 us and 1.3 bytes a proposal event), 0.57
// us an event at T=1024 (P=2 M=2, 4.8 s), estimated as a leader's (0.2 s, 18 MB): T events more
// a task and rank, at 0.5 us and 1.5 bytes each.
inline TaskCost protocol_cost(TaskCost cost, int tp, TpProtocol protocol) {
  if (tp > 1 && protocol == TpProtocol::Agree) {
    cost.seconds += tp * 0.5e-6;
    cost.bytes += tp * 1.5;
  }
  return cost;
}

// Bytes a simulated run of shape `c` over `tp` ranks holds at `per_task` bytes a task.
inline double simulated_bytes(const PipelineConfig& c, int tp, double per_task) {
  return tasks_of(c, tp) * per_task + static_cast<double>(c.pp) * tp * kStageBytes;
}

// `what` ("simulate: 4 runs of 99.9M tasks") needs `tasks` tasks at `cost`, `evaluations`
// times over for the time. Throws InputError naming `what`, the estimate, the available memory
// (core/memory.hpp) and `lower` (the flags that shrink it) when it does not fit; prints the
// estimate to stderr when it needs more than 1 GB or 10 s and stderr is a terminal.
void check_fits(const std::string& what, double tasks, const TaskCost& cost,
                const std::string& lower, double evaluations = 1);
// check_fits, the estimate returned ("" where it would not be printed) for say_estimate() once
// the command's input is read: one refused at once printed it above the refusal.
std::string checked_estimate(const std::string& what, double tasks, const TaskCost& cost,
                             const std::string& lower, double evaluations = 1);
void say_estimate(const std::string& line);

}  // namespace rrfp

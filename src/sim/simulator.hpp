#pragma once
// Discrete-event simulation of one training step (semantics.md §3-5). The simulator owns time
// and the event queue; every decision is taken by the core's state machines, the same ones the
// runtime drives: the StageArbiter, Readiness (join counters), Rendezvous (blocking mode) and
// the TP choice protocols. Each stage is a group of T tensor-parallel ranks; a task's
// collective ends when the slowest rank of the group gets there.
#include <cstdint>
#include <functional>
#include <optional>

#include "core/hint.hpp"
#include "core/rank_driver.hpp"
#include "core/record.hpp"
#include "sim/workload.hpp"

namespace rrfp {

// The dispatch every executor shares (the arbiter's options, resolved by simulate(); the
// communication mode; the TP protocol), and what the simulator adds. The group size is the
// realized work's.
struct SimOptions : DispatchOptions {
  bool record = true;  // keep per-task records and blocked spans (traces, checks)
  // The caller ran check_work(work, model) on this very work, which has not changed since: a
  // planner simulating one work thousands of times checks it once (a twentieth of each run).
  bool work_checked = false;
  // Called with (group tasks done, group tasks in all) about every 2^14 tasks of its ranks
  // (kProgressEvery: at TP T, every 2^14 / T group tasks, a power of two): progress of huge
  // runs, and a caller's chance to stop one by throwing (Python's Ctrl-C: every 2^20 group
  // tasks at TP 100 was half a minute).
  std::function<void(std::int64_t done, std::int64_t total)> progress;
  static constexpr std::int64_t kProgressEvery = 1 << 14;
};

// Throws DeadlockError (with every stage's state) if the run cannot finish and
// CollectiveMismatchError if ranks of a group enter different collectives.
StepRecord simulate(const WorkModel& m, const Hint& hint, const RealizedWork& work,
                    const SimOptions& opt);

// simulate()'s makespan, none where the run cannot finish (it deadlocks, or the ranks of a group
// enter different collectives): what a planner asks of thousands of candidate orders, many of
// which deadlock. Keeps no records; describing the stuck ranks and
// throwing cost such an evaluation a seventh of its time.
std::optional<std::int64_t> simulated_makespan(const WorkModel& m, const Hint& hint,
                                               const RealizedWork& work, SimOptions opt);

}  // namespace rrfp

#pragma once
// What build_run (sim/timeline.hpp) takes from the tasks' times beyond their durations: stages'
// clocks put onto stage 0's where each rank kept its own, and the latency of messages nothing
// timed, seen from when their consumers started.
#include <vector>

#include "sim/timeline.hpp"

namespace rrfp {

// The task whose output `t` receives from another stage, if any (semantics.md §1).
bool cross_stage_producer(const WorkModel& m, const TaskId& t, TaskId& producer);

// Shifts each (stage, tp rank)'s clock onto stage 0's rank 0's, the tasks' `start` and `end`
// (per [rank * num_tasks + index] slot) and the receives alike: a stage's TP ranks by their
// tasks' ends, the stages by the messages between them (docs/twin.md); see build_run.
void align_clocks(const WorkModel& m, int tp, std::vector<double>& start, std::vector<double>& end,
                  std::vector<TimelineRecv>& recvs);

// Inputs a trace says were taken before they were made: consumers that start more than
// `slack_us` before their producer on another stage ended (per TP rank), and the largest such
// lead. Clocks that disagree between ranks (or a hand-edited trace) do it; the measured step
// then spans other instants than the tasks', and the twin's error against it means nothing.
struct EarlyInputs {
  int count = 0;
  double worst_us = 0;
};
EarlyInputs early_inputs(const WorkModel& m, int tp, const std::vector<double>& start,
                         const std::vector<double>& end, double slack_us);

// Messages nothing timed, from when their consumers started: a consumer idle until its input's
// producer ended waited for that message, so it took the consumer's start minus the producer's
// end (delivery and wake-up, what the twin's latency stands for). Messages that arrived while
// their consumer was busy cannot be seen; they get the median of the seen ones. Returns how
// many were seen.
int infer_latencies(const WorkModel& m, int tp, const std::vector<double>& start,
                    const std::vector<double>& end, const std::vector<char>& measured,
                    RealizedWork& r);

}  // namespace rrfp

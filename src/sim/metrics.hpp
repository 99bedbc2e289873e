#pragma once
// Per-run metrics of semantics.md §5, and the policy-independent lower bound on the makespan.
#include <cstdint>
#include <vector>

#include "sim/simulator.hpp"

namespace rrfp {

struct LowerBound {
  std::int64_t value = 0;          // max of (a) and (b)
  std::int64_t stage_bound = 0;    // (a) lead-in + summed work + tail of the tightest stage
  int stage = 0;                   //     ... and which stage that is
  std::int64_t critical_path = 0;  // (b) the longest dependency path
  // (c) with a back-pressure limit L: on stage s at most L microbatch-chunks are between the
  // start of their F and the end of their B (docs/design-decisions.md, "The memory bound").
  // Reported beside `value`, not yet in it (the efficiencies of the results pages use (a), (b)).
  std::int64_t memory = 0;
  int memory_stage = 0;
};

// Uses realized durations: a task of a TP group occupies the group at least as long as its
// slowest rank plus the collective; a message takes at least its fastest rank's latency.
// `limit` > 0 adds the memory bound (c): the run's resolved limit where it holds D, that is
// ready dispatch with V = 1 (the fixed policy follows its list whatever the limit, and with
// V > 1 a microbatch draining through its chunks may pass it). `threads`: at most this many
// (0: one a core, up to 8).
LowerBound lower_bound(const WorkModel& m, const RealizedWork& w, int limit = 0, int threads = 0);

// The durations a measured step's recorded tasks took (TP rank 0's, no messages): the lower
// bound of that very step, for runs whose durations are not modelled (training, Python stages).
RealizedWork measured_work(const WorkModel& m, const StepRecord& r);
// Replaces `w`'s compute durations with what a measured step's tasks took, every TP rank its
// own (messages, collectives and the rest of `w` stay): `rrfp run --compare` replays a run with
// them, so the emulation's own error (sleeps that overshoot on busy cores) is told apart from
// the twin's. Throws InputError when the record lacks a task of any rank.
void use_measured_compute(const WorkModel& m, RealizedWork& w, const StepRecord& r);

struct StageMetrics {
  // Averages over the stage's tensor-parallel ranks, in nanoseconds.
  std::int64_t busy = 0, blocked = 0, idle = 0;
  int peak_d = 0, peak_pending_w = 0;
};

struct RunMetrics {
  std::int64_t makespan = 0;
  double bubble_ratio = 0;  // 1 - busy / (P * makespan), busy averaged over TP ranks
  LowerBound bound;
  double efficiency = 0;  // lower bound / makespan
  int limit = 0, max_pending_w = 0;
  std::int64_t coordination_rounds = 0, failed_rounds = 0;
  // Time a rank spent blocked in TP coordination (agree rounds, waiting for the leader's
  // choice), averaged over all P*T ranks.
  std::int64_t coordination_per_rank = 0;
  // Time a rank spent inside its tasks' collectives: the collective's own time and the wait
  // for the rest of its group (with tp_sigma 0 and no wait, still the collective's time).
  std::int64_t collective_per_rank = 0;
  std::vector<StageMetrics> stages;
};

RunMetrics compute_metrics(const StepRecord& r, const LowerBound& lb);

// The q-quantile of `v` by nearest rank (the element at round(q * (n - 1)) in sorted order; the
// median is v[n / 2]); 0 for none. Durations such as dispatch gaps; `v` is taken by value and
// partly reordered.
std::int64_t percentile(std::vector<std::int64_t> v, double q);
// The median of `v`: of an even count, the mean of the middle two; 0 for none. What every
// report calls a median of measured durations (rrfp run, loss.csv, StepRecord in Python),
// which took the upper middle in two of them and the mean in the third.
double median(std::vector<std::int64_t> v);

}  // namespace rrfp

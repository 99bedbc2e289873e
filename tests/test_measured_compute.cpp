// use_measured_compute (sim/metrics.hpp): what `rrfp run --compare` replays a run with. A step's
// own record gives back, rank by rank, the compute durations it ran with, so re-simulating with
// them reproduces the step exactly; a record short of a task is refused by name.
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "expect_error.hpp"
#include "shapes.hpp"
#include "sim_helpers.hpp"

namespace rrfp::test {
namespace {

// Over random shapes, TP sizes, communication modes and presets: durations wiped, then taken
// from the step's record, are the ones it ran with, and the replay ends at the same instant.
TEST(MeasuredCompute, AStepsRecordGivesBackItsDurationsAndItsMakespan) {
  const std::vector<std::string> hints{"1f1b", "bfw", "zb-h1", "interleaved-1f1b"};
  int runs = 0;
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    const std::string& name = hints[seed % hints.size()];
    const Shape sh = random_shape(name, seed);
    const WorkModel m(sh.cfg);
    const Hint hint = make_hint(name, m);
    WorkloadParams wp = workload_preset(seed % 2 ? "jitter" : "multimodal");
    wp.tp_collective_us = 3;
    const RealizedWork work = realize(wp, m, sh.tp, seed);
    SimOptions o;
    o.comm = sh.comm;
    o.tp_protocol = sh.protocol;
    o.arbiter.policy = name != "bfw" && seed % 3 == 0 ? Policy::Fixed : Policy::Ready;
    o.record = true;
    const StepRecord step = simulate(m, hint, work, o);
    RealizedWork replay = work;
    std::fill(replay.compute_ns.begin(), replay.compute_ns.end(), -1);
    use_measured_compute(m, replay, step);
    const std::string ctx = name + " seed " + std::to_string(seed);
    ASSERT_EQ(replay.compute_ns, work.compute_ns) << ctx;
    ASSERT_EQ(simulate(m, hint, replay, o).makespan, step.makespan) << ctx;
    ++runs;
  }
  EXPECT_EQ(runs, 200);
}

// Measured durations replace the modelled ones, each TP rank its own, and nothing else changes.
TEST(MeasuredCompute, EachRankKeepsItsOwnMeasuredDuration) {
  const WorkModel m(config(2, 2));
  RealizedWork w = realize(workload_preset("uniform"), m, 2, 1);
  const RealizedWork before = w;
  StepRecord r;
  for (int rank = 0; rank < 2; ++rank)
    for (int i = 0; i < m.num_tasks(); ++i) {
      TaskRecord t;
      t.task = m.task(i);
      t.stage = m.stage_of(t.task);
      t.rank = rank;
      t.start = 1000;
      t.compute_end = 1000 + 10 * i + rank + 1;
      r.tasks.push_back(t);
    }
  use_measured_compute(m, w, r);
  for (int rank = 0; rank < 2; ++rank)
    for (int i = 0; i < m.num_tasks(); ++i)
      EXPECT_EQ(w.compute(rank, i), 10 * i + rank + 1);
  EXPECT_EQ(w.message_ns, before.message_ns);
  EXPECT_EQ(w.collective_ns, before.collective_ns);
}

TEST(MeasuredCompute, RefusesARecordShortOfATaskOrWithAStrangeRank) {
  const WorkModel m(config(2, 2));
  RealizedWork w = realize(workload_preset("uniform"), m, 1, 1);
  StepRecord r;
  for (int i = 1; i < m.num_tasks(); ++i) {  // no record of task 0
    TaskRecord t;
    t.task = m.task(i);
    t.compute_end = 5;
    r.tasks.push_back(t);
  }
  try {
    use_measured_compute(m, w, r);
    FAIL() << "a record short of a task was taken";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "measured step: no record of task " + to_string(m.task(0)) + " on TP rank 0");
  }
  TaskRecord odd;
  odd.task = m.task(0);
  odd.rank = 1;  // the run has one TP rank
  r.tasks.push_back(odd);
  EXPECT_ERROR(use_measured_compute(m, w, r), InputError,
               "measured step: task F c0 m0 on TP rank 1 is outside the run's 1 ranks");
}

// measured_work over another process's record: a pipeline whose processes split the backward
// differently merged W tasks into a model without them, written past its vectors (a heap
// overflow found only at teardown). Every task outside the model is refused before any write.
TEST(MeasuredWork, RefusesATaskTheModelDoesNotHave) {
  const WorkModel m(config(2, 2));  // no split backward: no W tasks
  StepRecord r;
  for (int i = 0; i < m.num_tasks(); ++i) {
    TaskRecord t;
    t.task = m.task(i);
    t.compute_end = 5;
    r.tasks.push_back(t);
  }
  EXPECT_EQ(measured_work(m, r).compute_ns, std::vector<std::int64_t>(m.num_tasks(), 5));
  for (const TaskId odd : {TaskId{Kind::W, 1, 1}, TaskId{Kind::F, 2, 0}, TaskId{Kind::B, 0, 2}}) {
    StepRecord bad = r;
    TaskRecord t;
    t.task = odd;
    bad.tasks.push_back(t);
    EXPECT_ERROR(measured_work(m, bad), Error,
                 "internal: measured step: task " + to_string(odd) + " is not a task of the model");
  }
}

}  // namespace
}  // namespace rrfp::test

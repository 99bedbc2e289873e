// Legacy PyTorch traces start each process's clock on its own. Where the trace records the
// receives, they align neighbouring stages; without them, the tasks do: no consumer starts
// before its producer ended. A trace whose ranks' clocks are shifted apart must replay as
// the step it recorded, the shift neither read as message time nor as a longer step.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>

#include "report/predict.hpp"
#include "sim/timeline.hpp"
#include "sim_helpers.hpp"

namespace rrfp::test {
namespace {

// A simulated fixed schedule's timeline with every message 300 us, as a measured run records
// it (no send times, no receives), each stage's clock `shift_us(s)` off the first's.
Timeline shifted_timeline(const WorkModel& m, const char* hint, std::uint64_t seed,
                          double (*shift_us)(int), StepRecord& truth) {
  WorkloadParams wp = workload_preset("language");
  wp.comm_latency_us = 300;
  wp.comm_bandwidth_gbps = 0;
  wp.comm_sigma = 0;
  RealizedWork w = realize(wp, m, 1, seed);
  w.coord_ns = 0;
  SimOptions opt;
  opt.arbiter.policy = Policy::Fixed;
  opt.record = true;
  truth = simulate(m, make_hint(hint, m), w, opt);
  Timeline t = timeline_of(truth);
  t.clocks_aligned = false;
  for (TimelineTask& x : t.tasks) {
    x.send_us = -1;
    x.start_us += shift_us(m.stage_of(x.task));
  }
  return t;
}

TEST(ClockAlignment, TasksAlignStagesWithoutReceives) {
  auto ahead = [](int s) { return 3000.0 * s; };                // each stage 3 ms later
  auto mixed = [](int s) { return s % 2 ? -5000.0 : 1700.0; };  // both ways
  for (auto* shift : {+ahead, +mixed})
    for (const char* hint : {"1f1b", "gpipe"})
      for (std::uint64_t seed = 1; seed <= 3; ++seed) {
        WorkModel m(config(4, 8));
        StepRecord truth;
        const Timeline t = shifted_timeline(m, hint, seed, shift, truth);
        const ImportedRun in = build_run(t, m, 1, -1, "trace");
        const double step = static_cast<double>(truth.makespan);
        // The ranks back on one clock: the step as long as it was (it read 9 ms longer).
        EXPECT_NEAR(static_cast<double>(in.measured_ns), step, 1e-3 * step) << hint << seed;
        // Every message seen from an idle consumer took its 300 us, not 300 us plus a shift.
        for (int i = 0; i < in.work.num_tasks; ++i) {
          const std::optional<TaskId> p = data_producer(m.task(i));
          if (!p || !m.valid(*p) || m.stage_of(*p) == m.stage_of(m.task(i))) continue;
          EXPECT_NEAR(static_cast<double>(in.work.message(0, m.index(*p))), 300e3, 2e3)
              << hint << " seed " << seed << " " << to_string(*p);
        }
        const Prediction p = predict(in, m.config(), 1);
        EXPECT_LT(std::abs(p.reproduction_error()), 1e-3) << hint << " seed " << seed;
      }
}

// A simulated step at TP 2 ranked by 1F1B's list, each task's span wrapping its collective (what a
// label around a stage's forward records: the all-reduces are inside it), each (stage, TP
// rank) on a clock of its own, `shift_us(stage, rank)` off the first's.
Timeline tp_timeline(const WorkModel& m, std::uint64_t seed, double (*shift_us)(int, int),
                     StepRecord& truth) {
  WorkloadParams wp = workload_preset("language");
  wp.comm_latency_us = 300;
  wp.comm_bandwidth_gbps = 0;
  wp.comm_sigma = 0;
  RealizedWork w = realize(wp, m, 2, seed);
  w.coord_ns = 40'000;  // the leader's choice takes 40 us to reach its follower
  SimOptions opt;
  opt.arbiter.policy = Policy::Ready;  // a group that chooses together (a fixed one need not)
  opt.record = true;
  truth = simulate(m, make_hint("1f1b", m), w, opt);
  Timeline t;
  t.format = "torch";
  t.clocks_aligned = false;
  for (const TaskRecord& x : truth.tasks)
    t.tasks.push_back({x.task, x.rank,
                       static_cast<double>(x.start) / 1e3 + shift_us(x.stage, x.rank),
                       static_cast<double>(x.end - x.start) / 1e3, -1.0});
  return t;
}

// A stage's TP ranks are processes of their own too. Aligned per rank along the stages only,
// rank 1's clock stayed where it began: a 2 ms step whose rank 1 started 3 ms later read 5 ms,
// and the 3 ms were replayed as the coordination of every task.
TEST(ClockAlignment, TensorParallelRanksShareTheirStageClock) {
  auto none = [](int, int) { return 0.0; };
  auto apart = [](int s, int r) { return 3000.0 * r - 1700.0 * s + (s * r % 2 ? 900.0 : 0.0); };
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    WorkModel m(config(3, 6));
    StepRecord truth;
    const ImportedRun one = build_run(tp_timeline(m, seed, none, truth), m, 2, -1, "trace");
    const ImportedRun in = build_run(tp_timeline(m, seed, apart, truth), m, 2, -1, "trace");
    const double step = static_cast<double>(truth.makespan);
    EXPECT_NEAR(static_cast<double>(in.measured_ns), step, 1e-3 * step) << seed;
    EXPECT_NEAR(static_cast<double>(one.measured_ns), step, 1e-3 * step) << seed;
    // The follower's lag is the choice's 40 us, not a clock's difference.
    ASSERT_TRUE(in.coordination_measured) << seed;
    EXPECT_NEAR(static_cast<double>(in.work.coord_ns), 40e3, 1e3) << seed;
    for (size_t i = 0; i < in.start_ns.size(); ++i)
      EXPECT_NEAR(static_cast<double>(in.start_ns[i]), static_cast<double>(one.start_ns[i]), 1e3)
          << seed << " slot " << i;
    const Prediction shifted = predict(in, m.config(), 2), same = predict(one, m.config(), 2);
    EXPECT_NEAR(static_cast<double>(shifted.replayed.result.makespan),
                static_cast<double>(same.replayed.result.makespan), 1e-3 * step)
        << seed;
  }
}

}  // namespace
}  // namespace rrfp::test

// Timelines at their edges: the TP collective that ends a step (and the none that ends a W), tasks
// at the boundary of back-to-back profiler steps, and overlaps of tasks shorter than a clock's
// rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "core/error.hpp"
#include "expect_error.hpp"
#include "report/predict.hpp"
#include "report/report.hpp"
#include "sim/trace_import.hpp"
#include "sim_helpers.hpp"

namespace rrfp::test {
namespace {

// 1F1B at P=1 M=1 TP=2, F = B = 1 ms split over the ranks, collectives of 1 ms: F 0-0.5,
// collective 0.5-1.5, B 1.5-2, collective 2-3. The measured step ends with the last collective
// at 3 ms; it ended at the last compute, 2 ms, and the twin's exact replay read +50%.
TEST(TimelineEdges, TheMeasuredStepEndsWithItsLastCollective) {
  const WorkModel m(config(1, 1));
  WorkloadParams w;
  w.tp_sigma = 0;
  w.tp_collective_us = 1000;
  w.coord_latency_us = 0;
  ReportRun run;
  run.label = "fixed 1f1b (async)";
  run.cfg = m.config();
  SimOptions opt;
  opt.arbiter.policy = Policy::Fixed;
  run.result = simulate(m, make_hint("1f1b", m), realize(w, m, 2, 1), opt);
  ASSERT_EQ(run.result.makespan, 3'000'000);
  const std::string path = ::testing::TempDir() + "rrfp_edges_collective.json";
  write_chrome_trace(path, {run});
  const ImportedRun in = import_trace(path, m, 2);
  EXPECT_EQ(in.work.collective_ns, 1'000'000);
  EXPECT_EQ(in.measured_ns, 3'000'000);
  const Prediction p = predict(in, m.config(), 2);
  EXPECT_EQ(p.measured.metrics.makespan, 3'000'000);
  EXPECT_EQ(p.replayed.metrics.makespan, 3'000'000);
  std::remove(path.c_str());
}

// A W's ranks exchange nothing (its weight gradients stay on their rank; training's W calls no
// collective): 1F1B split at P=1 M=1 TP=2 with collectives of 1 ms runs F, collective, B,
// collective, W. Its trace's collective reads 1 ms, the mean over F and B. The simulator ended a
// W in a collective too (the step 1 ms longer), and the importer's mean over every task, W's 0
// included, read 2/3 ms.
TEST(TimelineEdges, AWEndsInNoCollective) {
  const WorkModel m(config(1, 1, 1, true));
  WorkloadParams wp;
  wp.tp_sigma = 0;
  wp.tp_collective_us = 1000;
  wp.coord_latency_us = 0;
  const RealizedWork w = realize(wp, m, 2, 1);
  std::int64_t computed = 0;
  for (const Kind k : {Kind::F, Kind::B, Kind::W}) {
    const int i = m.index({k, 0, 0});
    ASSERT_GT(w.compute(0, i), 0) << static_cast<int>(k);
    computed += std::max(w.compute(0, i), w.compute(1, i));
  }
  ReportRun run;
  run.label = "fixed 1f1b (async)";
  run.cfg = m.config();
  SimOptions opt;
  opt.arbiter.policy = Policy::Fixed;
  run.result = simulate(m, make_hint("1f1b", m), w, opt);
  ASSERT_EQ(run.result.makespan, computed + 2'000'000);
  const std::string path = ::testing::TempDir() + "rrfp_edges_w_collective.json";
  write_chrome_trace(path, {run});
  const ImportedRun in = import_trace(path, m, 2);
  EXPECT_EQ(in.work.collective_ns, 1'000'000);
  const Prediction p = predict(in, m.config(), 2);
  EXPECT_EQ(p.replayed.metrics.makespan, run.result.makespan);
  std::remove(path.c_str());
}

// One rank of a PyTorch profiler trace of P=2 M=2 1F1B, three back-to-back steps of 6 ms from
// `zero` (us): each step starts with a task at its first instant, at the previous one's end.
std::string torch_rank(int stage, double zero) {
  // Each task's offset in its step (ms): stage 0 F0 F1 B0 B1, stage 1 F0 B0 F1 B1.
  const char* names[2][4] = {{"PP:0F0", "PP:0F1", "PP:0B0", "PP:0B1"},
                             {"PP:1F0", "PP:1B0", "PP:1F1", "PP:1B1"}};
  const int at[2][4] = {{0, 1, 3, 5}, {1, 2, 3, 4}};
  std::string events;
  auto event = [&](const std::string& name, double ts, double dur) {
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  R"(%s{"ph": "X", "name": "%s", "ts": %.1f, "dur": %.1f, "pid": 1, "tid": 1})",
                  events.empty() ? "" : ", ", name.c_str(), ts, dur);
    events += buf;
  };
  for (int step = 0; step < 3; ++step) {
    const double start = zero + 6000.0 * step;
    event("ProfilerStep#" + std::to_string(step), start, 6000);
    for (int k = 0; k < 4; ++k)
      event(names[stage][k], start + 1000.0 * at[stage][k], 1000);
  }
  return R"({"traceEvents": [)" + events + R"(], "distributedInfo": {"rank": )" +
         std::to_string(stage) + "}}";
}

// A task at the boundary of two steps is the later one's: closed at both ends, the earlier step
// took it, and then held it twice ("appears twice in one step") while the later lacked its first
// task and took the next step's (its replay deadlocked). On an epoch clock (1.7e15 us) alike.
TEST(TimelineEdges, ATaskAtAStepBoundaryBelongsToTheStepStartingThere) {
  const WorkModel m(config(2, 2));
  for (const double zero : {0.0, 1.7e15})
    for (int step = 0; step < 3; ++step) {
      TraceOptions o;
      o.step = step;
      const ImportedRun in = import_trace_texts(
          {{"rank0.json", torch_rank(0, zero)}, {"rank1.json", torch_rank(1, zero)}}, m, 1, o);
      EXPECT_EQ(in.run, "ProfilerStep#" + std::to_string(step));
      EXPECT_EQ(in.measured_ns, 6'000'000) << "step " << step << " from " << zero;
      EXPECT_EQ(in.start_ns[m.index({Kind::F, 0, 0})], 0) << "step " << step;
      EXPECT_EQ(in.start_ns[m.index({Kind::B, 0, 1})], 5'000'000) << "step " << step;
      const Prediction p = predict(in, m.config(), 1);
      EXPECT_EQ(p.replayed.metrics.makespan, 6'000'000) << "step " << step << " from " << zero;
    }
}

// A task at the end of the last step, where no step starts, is still that step's (a task of no
// time as the rank's last).
TEST(TimelineEdges, ATaskAtTheLastStepsEndIsThatSteps) {
  const std::string text =
      R"({"traceEvents": [{"ph": "X", "name": "ProfilerStep#0", "ts": 0, "dur": 2000},)"
      R"( {"ph": "X", "name": "Forward 0", "ts": 0, "dur": 2000},)"
      R"( {"ph": "X", "name": "Backward 0", "ts": 2000, "dur": 0}]})";
  const WorkModel m(config(1, 1));
  const ImportedRun in = import_trace_texts({{"t.json", text}}, m, 1);
  EXPECT_EQ(in.work.compute_ns, (std::vector<std::int64_t>{2'000'000, 0}));
  EXPECT_EQ(in.measured_ns, 2'000'000);
}

// P=1 M=2 on one rank: F0, F1, B0, B1 at the given starts and durations (us).
Timeline one_rank(const double start[4], const double dur[4]) {
  Timeline tl;
  tl.format = "test";
  const TaskId tasks[4] = {{Kind::F, 0, 0}, {Kind::F, 0, 1}, {Kind::B, 0, 0}, {Kind::B, 0, 1}};
  for (int k = 0; k < 4; ++k)
    tl.tasks.push_back({tasks[k], 0, start[k], dur[k]});
  return tl;
}

// The overlap a rank's tasks may show is the clocks' (1 us and 1% of the earlier task), but
// never half the shorter task: two 0.5 us tasks at one ts were accepted as one after the other.
TEST(TimelineEdges, AnOverlapIsToleratedByTheDurationsInvolved) {
  const WorkModel m(config(1, 2));
  auto read = [&](const double start[4], const double dur[4]) {
    return build_run(one_rank(start, dur), m, 1, 0, "t");
  };
  const double half[4] = {0.5, 0.5, 0.5, 0.5};
  const double together[4] = {0, 0, 1, 2};
  EXPECT_ERROR(read(together, half), InputError,
               "t: tasks F c0 m0 and F c0 m1 overlap on stage 0 (0.000 us is before 0.500 us)");
  // 0.2 us into a 0.5 us task: less than half of it, a clock's rounding.
  const double slight[4] = {0, 0.3, 1, 2};
  EXPECT_NO_THROW(read(slight, half));
  // 1 ms tasks 10 us apart: within 1 us + 1% (11 us) as before; 12 us is not.
  const double ms[4] = {1000, 1000, 1000, 1000};
  const double jitter[4] = {0, 990, 2000, 3000}, deeper[4] = {0, 988, 2000, 3000};
  EXPECT_NO_THROW(read(jitter, ms));
  EXPECT_ERROR(read(deeper, ms), InputError, "overlap on stage 0 (988.000 us is before");
  // A task of no time that starts with another ran before it, whichever the trace lists first:
  // F1 of no time at F0's start (read after F0, it lay 10 us deep inside it).
  const double with_f0[4] = {0, 0, 10, 20}, none_dur[4] = {10, 0, 10, 10};
  EXPECT_NO_THROW(read(with_f0, none_dur));
}

}  // namespace
}  // namespace rrfp::test

// check_run is the oracle of the invariant property tests (simulator and runtime): they only
// pass because it returns nothing for the runs they make. These tests show it rejects each
// fault it is meant to catch: a valid record from a small simulation, with one fault planted,
// must come back with the message naming that fault.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/check.hpp"
#include "sim_helpers.hpp"

namespace rrfp::test {
namespace {

// P = 2, M = 4, split backward, T = 2: two ranks per stage, so a fault on one rank only is
// told apart from a fault on the whole group.
constexpr int kTp = 2;

struct Fixture {
  WorkModel m{config(2, 4, 1, true)};
  StepRecord rec;
};

Fixture simulate_small(const std::string& hint_name = "1f1b", Policy policy = Policy::Fixed) {
  Fixture f;
  WorkloadParams p;  // uniform and jitter-free: both ranks of a group see the same times
  p.forward_us = 1000;
  p.backward_ratio_min = p.backward_ratio_max = 1;
  p.weight_share = 0.5;
  p.tp_sigma = 0;
  const RealizedWork w = realize(p, f.m, kTp, 1);
  SimOptions o;
  o.arbiter.policy = policy;
  o.record = true;
  f.rec = simulate(f.m, make_hint(hint_name, f.m), w, o);
  return f;
}

// The record of `t` on `rank`; throws (failing the test) where there is none.
TaskRecord& record_of(std::vector<TaskRecord>& tasks, const TaskId& t, int rank) {
  auto it = std::find_if(tasks.begin(), tasks.end(),
                         [&](const TaskRecord& r) { return r.task == t && r.rank == rank; });
  if (it == tasks.end()) throw std::logic_error("no record of " + to_string(t));
  return *it;
}

// The violations, one a line, for failure messages (safe on an empty list).
std::string joined(const std::vector<std::string>& bad) {
  std::string out = std::to_string(bad.size()) + " violation(s):";
  for (const std::string& b : bad)
    out += "\n  " + b;
  return out;
}

// Whether one of the violations contains `what`; on failure the message lists them all.
::testing::AssertionResult reports(const std::vector<std::string>& bad, const std::string& what) {
  for (const std::string& b : bad)
    if (b.find(what) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "no violation contains \"" << what << "\"; " << joined(bad);
}

const CheckOptions kFixed{.policy = Policy::Fixed};

// The control: without it a check that rejects everything would pass every test below.
TEST(CheckRun, AcceptsTheValidRecord) {
  Fixture f = simulate_small();
  ASSERT_EQ(f.rec.tasks.size(), static_cast<size_t>(kTp * f.m.num_tasks()));
  const auto bad = check_run(f.m, kTp, f.rec.tasks, kFixed);
  EXPECT_TRUE(bad.empty()) << joined(bad);
}

TEST(CheckRun, RejectsATaskRunTwice) {
  Fixture f = simulate_small();
  auto tasks = f.rec.tasks;
  tasks.push_back(record_of(tasks, {Kind::W, 1, 2}, 1));
  EXPECT_TRUE(reports(check_run(f.m, kTp, tasks, kFixed), "W c1 m2 ran twice on rank 1"));
}

TEST(CheckRun, RejectsATaskThatNeverRan) {
  Fixture f = simulate_small();
  auto tasks = f.rec.tasks;
  const TaskId gone{Kind::B, 0, 3};
  std::erase_if(tasks, [&](const TaskRecord& r) { return r.task == gone && r.rank == 1; });
  ASSERT_EQ(tasks.size() + 1, f.rec.tasks.size());
  const auto bad = check_run(f.m, kTp, tasks, kFixed);
  EXPECT_TRUE(reports(bad, "B c0 m3 never ran on rank 1"));
  // Rank 0 ran it: the check is per rank, not per group.
  EXPECT_FALSE(reports(bad, "B c0 m3 never ran on rank 0"));
}

TEST(CheckRun, RejectsRecordsOutsideTheModel) {
  Fixture f = simulate_small();
  {
    auto tasks = f.rec.tasks;
    record_of(tasks, {Kind::F, 1, 0}, 0).rank = kTp;  // no such rank
    EXPECT_TRUE(reports(check_run(f.m, kTp, tasks, kFixed), "invalid record F c1 m0 on stage 1"));
  }
  {
    auto tasks = f.rec.tasks;
    record_of(tasks, {Kind::F, 1, 0}, 0).stage = 0;  // chunk 1 lives on stage 1
    EXPECT_TRUE(reports(check_run(f.m, kTp, tasks, kFixed), "invalid record F c1 m0 on stage 0"));
  }
  {
    auto tasks = f.rec.tasks;
    record_of(tasks, {Kind::F, 1, 0}, 0).task.mb = 4;  // M = 4: microbatches 0 to 3
    EXPECT_TRUE(reports(check_run(f.m, kTp, tasks, kFixed), "invalid record F c1 m4 on stage 1"));
  }
}

TEST(CheckRun, RejectsATaskThatEndsBeforeItStarts) {
  Fixture f = simulate_small();
  {
    auto tasks = f.rec.tasks;
    TaskRecord& t = record_of(tasks, {Kind::F, 0, 1}, 0);
    t.end = t.start - 1;
    EXPECT_TRUE(reports(check_run(f.m, kTp, tasks, kFixed), "F c0 m1 ends before it starts"));
  }
  {
    auto tasks = f.rec.tasks;
    TaskRecord& t = record_of(tasks, {Kind::F, 0, 1}, 0);
    t.compute_end = t.start - 1;
    EXPECT_TRUE(reports(check_run(f.m, kTp, tasks, kFixed), "F c0 m1 ends before it starts"));
  }
}

TEST(CheckRun, RejectsATaskStartedBeforeItsInputArrived) {
  Fixture f = simulate_small();
  auto tasks = f.rec.tasks;
  // Stage 1's first task: moving its start to 0 overlaps nothing on its own stage, but its
  // input, F c0 m0 on stage 0, ended later.
  const std::int64_t input_end = record_of(tasks, {Kind::F, 0, 0}, 0).end;
  ASSERT_GT(input_end, 0);
  record_of(tasks, {Kind::F, 1, 0}, 0).start = 0;
  const auto bad = check_run(f.m, kTp, tasks, kFixed);
  EXPECT_TRUE(
      reports(bad, "F c1 m0 started at 0 before F c0 m0 ended at " + std::to_string(input_end)));
  EXPECT_EQ(bad.size(), 1u) << joined(bad);
}

TEST(CheckRun, RejectsTwoTasksAtOnceOnOneRank) {
  Fixture f = simulate_small();
  auto tasks = f.rec.tasks;
  // Stage 0 rank 1: F c0 m0 then F c0 m1 (no input between them); stretch the first over the
  // second.
  const TaskRecord& next = record_of(tasks, {Kind::F, 0, 1}, 1);
  TaskRecord& first = record_of(tasks, {Kind::F, 0, 0}, 1);
  ASSERT_LE(first.end, next.start);
  first.end = next.start + 1;
  EXPECT_TRUE(reports(check_run(f.m, kTp, tasks, kFixed),
                      "stage 0 ran F c0 m1 while F c0 m0 was still running"));
}

// GPipe under the fixed policy runs every forward first: stage 0 reaches D = M = 4.
TEST(CheckRun, RejectsDAboveItsBoundUnderReady) {
  Fixture f = simulate_small("gpipe");
  ASSERT_EQ(f.rec.peak_d[0], 4);
  const auto bad = check_run(f.m, kTp, f.rec.tasks, {.policy = Policy::Ready, .limit = 3});
  EXPECT_TRUE(reports(bad, "stage 0: D reached 4 at F c0 m3, above its bound 3"));
  // The bound itself is allowed; the fixed policy follows its list, so D goes unchecked.
  EXPECT_TRUE(check_run(f.m, kTp, f.rec.tasks, {.policy = Policy::Ready, .limit = 4}).empty());
  EXPECT_TRUE(check_run(f.m, kTp, f.rec.tasks, {.policy = Policy::Fixed, .limit = 3}).empty());
}

// With V >= 2 the bound is the limit plus V (a draining microbatch may pass the limit).
TEST(CheckRun, DBoundAddsVWhenInterleaved) {
  WorkModel m(config(2, 4, 2, false));
  SimOptions o;
  o.arbiter.policy = Policy::Fixed;
  const StepRecord rec = simulate(m, make_hint("bfs", m), unit_work(m), o);
  const int peak = *std::max_element(rec.peak_d.begin(), rec.peak_d.end());
  ASSERT_GT(peak, 2 + 1);
  EXPECT_TRUE(check_run(m, 1, rec.tasks, {.policy = Policy::Ready, .limit = peak - 2}).empty());
  EXPECT_TRUE(reports(check_run(m, 1, rec.tasks, {.policy = Policy::Ready, .limit = peak - 3}),
                      "above its bound " + std::to_string(peak - 1)));
}

// Pending W (B done - W done, split backward) against its cap.
TEST(CheckRun, RejectsPendingWAboveItsCapUnderReady) {
  Fixture f = simulate_small("zb-h1");
  const int peak = *std::max_element(f.rec.peak_pending_w.begin(), f.rec.peak_pending_w.end());
  ASSERT_GE(peak, 2);
  const auto bad =
      check_run(f.m, kTp, f.rec.tasks, {.policy = Policy::Ready, .max_pending_w = peak - 1});
  EXPECT_TRUE(reports(bad, ": pending W reached " + std::to_string(peak) + ", above the cap " +
                               std::to_string(peak - 1)));
  EXPECT_TRUE(
      check_run(f.m, kTp, f.rec.tasks, {.policy = Policy::Ready, .max_pending_w = peak}).empty());
  EXPECT_TRUE(
      check_run(f.m, kTp, f.rec.tasks, {.policy = Policy::Fixed, .max_pending_w = 1}).empty());
}

// A broken run can fault every task: the list stops at 20 so a report stays readable.
TEST(CheckRun, ListsAtMostTwentyViolations) {
  Fixture f = simulate_small();
  ASSERT_GT(kTp * f.m.num_tasks(), 20);
  const auto bad = check_run(f.m, kTp, {}, kFixed);
  ASSERT_EQ(bad.size(), 20u);
  EXPECT_TRUE(reports(bad, "never ran on rank 0"));
}

}  // namespace
}  // namespace rrfp::test

// The clocks of a job's processes (Job::clock_offset) and the merged record that lines them up
// (merge_step): threads as the processes, each told a clock id of its own where a test wants
// its clock measured. The threads share one clock, so the true offset is 0 and must lie within
// every measured one's bounds: causality guarantees it, whatever the machine's load.
#include <gtest/gtest.h>

#include <string>

#include "dist/job.hpp"
#include "dist/local_job.hpp"
#include "dist/step_merge.hpp"
#include "rank_threads.hpp"

namespace rrfp::test {
namespace {

std::vector<std::byte> id_of(const std::string& s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}

// Each rank's measured offset, with the clock ids given by rank.
std::vector<ClockOffset> measured(const std::vector<std::string>& ids) {
  const int world = static_cast<int>(ids.size());
  auto jobs = make_local_jobs(world);
  std::vector<ClockOffset> out(world);
  on_every_rank(world, [&](int i) {
    jobs[i]->set_layout(JobLayout{world, 1, 1});
    out[i] = measure_clock_offset(*jobs[i], id_of(ids[i]));
  });
  return out;
}

TEST(JobClock, ProcessesOnEndpointZerosClockAreNotMeasured) {
  for (const ClockOffset& o : measured({"boot a", "boot a", "boot a"})) {
    EXPECT_EQ(o.ns, 0);
    EXPECT_EQ(o.uncertainty_ns, 0);
  }
}

TEST(JobClock, AnotherClocksOffsetIsBoundedOnBothSides) {
  const auto got = measured({"boot a", "boot b", "boot a", "boot c"});
  EXPECT_EQ(got[0].ns, 0);
  EXPECT_EQ(got[0].uncertainty_ns, 0);
  EXPECT_EQ(got[2].ns, 0);  // endpoint 0's clock
  EXPECT_EQ(got[2].uncertainty_ns, 0);
  for (int e : {1, 3}) {
    EXPECT_GT(got[e].uncertainty_ns, 0) << "endpoint " << e << " was not measured";
    EXPECT_LE(got[e].ns - got[e].uncertainty_ns, 0) << "endpoint " << e;
    EXPECT_GE(got[e].ns + got[e].uncertainty_ns, 0) << "endpoint " << e;
  }
}

TEST(JobClock, ThisProcessesClockIdIsNamed) {
  const auto id = this_clock_id();
  ASSERT_FALSE(id.empty());
  EXPECT_NE(id[0], std::byte{0});  // a boot id or a host name, not nothing
  EXPECT_EQ(this_clock_id(), id);
}

// One task on each of two stages: stage 0's F of microbatch 0, and stage 1's F that takes
// its output, each process timing from its own start.
StepResult one_task(int stage, std::int64_t origin, std::int64_t start, std::int64_t end,
                    std::int64_t input_at) {
  StepResult r;
  r.origin_ns = origin;
  r.run.pp = 2;
  r.run.ranks.resize(2);
  r.run.peak_d.resize(2);
  r.run.peak_pending_w.resize(2);
  TaskRecord t;
  t.task = {Kind::F, stage, 0};
  t.stage = stage;
  t.start = start;
  t.compute_end = t.end = end;
  t.input_at = input_at;
  r.run.tasks.push_back(t);
  r.run.makespan = end;
  return r;
}

const TaskRecord& task_on(const StepResult& r, int stage) {
  for (const TaskRecord& t : r.run.tasks)
    if (t.stage == stage) return t;
  throw Error("no task on stage " + std::to_string(stage));
}

// Stage 1's process started 30 ns after stage 0's, so its times are 30 ns short on stage 0's:
// merged, its input came at 65, it started at 70, and the message took 70 - 50 = 20 ns (its
// rank was idle when it came). Each process counting from its own start, it came before
// stage 0's task ended and took 0 ns.
TEST(JobClock, MergedRecordsCountFromTheEarlierStartOnOneClock) {
  for (const bool first_into_second : {false, true}) {
    StepResult a = one_task(0, 1000, 10, 50, -1);
    StepResult b = one_task(1, 1030, 40, 90, 35);
    StepResult& into = first_into_second ? b : a;
    merge_step(into, pack_step(first_into_second ? a : b));
    SCOPED_TRACE(first_into_second ? "stage 0's record into stage 1's" : "stage 1's into 0's");
    EXPECT_EQ(into.origin_ns, 1000);
    EXPECT_EQ(into.run.makespan, 120);
    const TaskRecord& producer = task_on(into, 0);
    const TaskRecord& consumer = task_on(into, 1);
    EXPECT_EQ(producer.start, 10);
    EXPECT_EQ(producer.end, 50);
    EXPECT_EQ(consumer.start, 70);
    EXPECT_EQ(consumer.end, 120);
    EXPECT_EQ(consumer.input_at, 65);
    EXPECT_EQ(producer.send_ns, 20);
  }
}

}  // namespace
}  // namespace rrfp::test

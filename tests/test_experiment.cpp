// A scenario's simulated runs: run together (one draw of the work per shape, the lower bounds
// reckoned beside the simulations) they must give what each gives run alone, in order.
#include <gtest/gtest.h>

#include <cstdio>

#include "core/error.hpp"
#include "expect_error.hpp"
#include "report/experiment.hpp"
#include "report/report.hpp"

namespace rrfp::test {
namespace {

Scenario scenario(std::uint64_t seed, int tp) {
  Scenario sc;
  sc.cfg = make_config(4, 1, 16, "loop", "off", "1f1b");
  sc.tp = tp;
  sc.workload = workload_preset("multimodal");
  sc.seed = seed;
  return sc;
}

// The baselines and the hints of `rrfp sweep`, the split ones between the others, so that
// runs of the two shapes alternate.
std::vector<RunSpec> specs() {
  return {{"1f1b", Policy::Fixed, CommMode::Blocking, "fixed 1f1b (blocking)"},
          {"zb-h1", Policy::Fixed, CommMode::Async, ""},
          {"1f1b", Policy::Fixed, CommMode::Async, ""},
          {"bfw", Policy::Ready, CommMode::Async, ""},
          {"bf", Policy::Ready, CommMode::Async, ""},
          {"adaptive", Policy::Ready, CommMode::Blocking, ""}};
}

void expect_same(const ReportRun& a, const ReportRun& b, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(a.label, b.label);
  EXPECT_EQ(a.hint, b.hint);
  EXPECT_EQ(a.cfg.split_backward, b.cfg.split_backward);
  EXPECT_EQ(a.metrics.makespan, b.metrics.makespan);
  EXPECT_EQ(a.metrics.limit, b.metrics.limit);
  EXPECT_EQ(a.metrics.bound.value, b.metrics.bound.value);
  EXPECT_EQ(a.metrics.bound.stage_bound, b.metrics.bound.stage_bound);
  EXPECT_EQ(a.metrics.bound.critical_path, b.metrics.bound.critical_path);
  EXPECT_EQ(a.metrics.bound.memory, b.metrics.bound.memory);
  ASSERT_EQ(a.result.tasks.size(), b.result.tasks.size());
  for (std::size_t i = 0; i < a.result.tasks.size(); ++i) {
    const TaskRecord &x = a.result.tasks[i], &y = b.result.tasks[i];
    ASSERT_TRUE(x.task == y.task && x.rank == y.rank && x.start == y.start && x.end == y.end)
        << "record " << i;
  }
}

TEST(Experiment, RunsTogetherGiveWhatEachGivesAlone) {
  const Executor alone = [](const WorkModel& m, const Hint& h, const RealizedWork& w,
                            const SimOptions& o) { return simulate(m, h, w, o); };
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    const Scenario sc = scenario(seed, seed % 3 == 0 ? 2 : 1);
    const std::vector<RunSpec> sp = specs();
    const std::vector<ReportRun> together = run_scenarios(sc, sp);
    ASSERT_EQ(together.size(), sp.size());
    for (std::size_t i = 0; i < sp.size(); ++i) {
      const std::string what = "seed " + std::to_string(seed) + ", run " + std::to_string(i);
      expect_same(together[i], run_scenario(sc, sp[i], alone), what);
      expect_same(together[i], run_scenario(sc, sp[i]), what + " (one simulated run)");
    }
    // The split runs had the split shape; the bound of a run that holds its limit has the
    // memory term, the others none.
    EXPECT_TRUE(together[1].cfg.split_backward && together[3].cfg.split_backward);
    EXPECT_FALSE(together[0].cfg.split_backward || together[4].cfg.split_backward);
    EXPECT_EQ(together[0].metrics.bound.memory, 0);
    EXPECT_GT(together[4].metrics.bound.memory, 0);
  }
}

// The bound summed on one thread, on two or on one a core: the same, field by field, since
// the ranges' partial results merge by integer sums, minima and maxima. Sizes past two ranges'
// worth, where a machine of two cores or more does split it (the runs above are too small to).
TEST(Experiment, TheLowerBoundIsTheSameOnAnyNumberOfThreads) {
  struct Shape {
    int pp, vpp, microbatches;
    bool split;
  };
  for (const Shape sh : {Shape{4, 1, 8192, false}, Shape{4, 2, 4096, true}}) {
    PipelineConfig c;
    c.pp = sh.pp;
    c.vpp = sh.vpp;
    c.microbatches = sh.microbatches;
    c.split_backward = sh.split;
    const WorkModel m(c);
    const RealizedWork w = realize(workload_preset("multimodal"), m, 1, 3);
    for (const int limit : {0, 5}) {
      const LowerBound one = lower_bound(m, w, limit, 1);
      for (const int threads : {2, 0}) {
        SCOPED_TRACE("V=" + std::to_string(sh.vpp) + " limit " + std::to_string(limit) + ", " +
                     std::to_string(threads) + " threads");
        const LowerBound b = lower_bound(m, w, limit, threads);
        EXPECT_EQ(b.value, one.value);
        EXPECT_EQ(b.stage_bound, one.stage_bound);
        EXPECT_EQ(b.stage, one.stage);
        EXPECT_EQ(b.critical_path, one.critical_path);
        EXPECT_EQ(b.memory, one.memory);
        EXPECT_EQ(b.memory_stage, one.memory_stage);
      }
    }
  }
}

TEST(Experiment, ARunThatCannotRunThrowsTheOptionsError) {
  const Scenario sc = scenario(1, 1);
  std::vector<RunSpec> sp = specs();
  sp.push_back({"bf", Policy::Fixed, CommMode::Async, ""});
  try {
    run_scenarios(sc, sp);
    FAIL() << "a fixed policy over a rule hint ran";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("`policy` fixed"), std::string::npos) << e.what();
  }
}

// A replayed trace is read once where with_replay_step read it for its step: runs of that shape
// take that read (they still run with the file gone), and give what a second read gives; runs
// of the other shape read the file for theirs.
TEST(Experiment, AReplayedTraceIsReadOnceForItsStepAndItsRuns) {
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    Scenario rec = scenario(seed, 1);
    rec.cfg.split_backward = true;
    rec.split_mode = "on";
    const std::string path = ::testing::TempDir() + "rrfp_read_once.json";
    write_chrome_trace(path, {run_scenario(rec, {"bfw", Policy::Ready, CommMode::Async, ""})});
    Scenario sc = scenario(seed, 1);
    sc.split_mode = "auto";
    sc.replay_path = path;
    sc.ordered_from_replay = true;
    const std::vector<RunSpec> sp = specs();
    const Scenario read = with_replay_step(sc, sp);
    ASSERT_TRUE(read.replay_read) << "with_replay_step kept no read";
    EXPECT_TRUE(read.replay_read_for.split_backward);
    Scenario again = read;
    again.replay_read.reset();
    const std::vector<RunSpec> split = {sp[1], sp[3]}, whole = {sp[0], sp[4]};
    const std::vector<ReportRun> fresh = run_scenarios(again, sp);
    const std::vector<ReportRun> kept = run_scenarios(read, sp);
    for (std::size_t i = 0; i < sp.size(); ++i)
      expect_same(kept[i], fresh[i], "seed " + std::to_string(seed) + ", run " + std::to_string(i));
    std::remove(path.c_str());
    const std::vector<ReportRun> gone = run_scenarios(read, split);
    expect_same(gone[0], fresh[1], "zb-h1 with the file gone");
    expect_same(gone[1], fresh[3], "bfw with the file gone");
    // Read anew, the file gone (the whole shape's runs took the split shape's read).
    EXPECT_ERROR(run_scenarios(read, whole), InputError, "does not exist");
  }
}

// Up to 16 stages every stage's peak D is listed; past that the column names the first stage of
// the largest and of the smallest, where every stage's would make a line of a thousand numbers.
TEST(Experiment, ThePeakColumnListsFewStagesAndSumsUpMany) {
  EXPECT_EQ(peak_d_column({}), "");
  EXPECT_EQ(peak_d_column({4, 3, 2, 1}), "4 3 2 1");
  std::vector<int> peaks(kPeaksListed, 7);
  std::string listed = "7";
  for (std::size_t s = 1; s < kPeaksListed; ++s)
    listed += " 7";
  EXPECT_EQ(peak_d_column(peaks), listed);
  peaks.push_back(9);  // one stage past the list: stage 16 is the largest
  peaks[3] = 2;
  peaks[5] = 2;
  peaks.push_back(9);
  EXPECT_EQ(peak_d_column(peaks), "max 9 (stage 16), min 2 (stage 3) of 18 stages");
}

}  // namespace
}  // namespace rrfp::test

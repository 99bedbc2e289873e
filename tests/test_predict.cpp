// rrfp predict on recorded steps. Its rows are the rules as they run: on a step recorded with the
// split backward, a rule that runs the backward whole (bf under `split_backward` auto) is replayed
// so, with each W's time in its B, as `simulate --replay --hint bf` replays it. Its row used to be
// BF with deferred W tasks, 8-9% faster than the BF a user would get.
#include <gtest/gtest.h>

#include <cstdio>

#include "report/predict.hpp"
#include "sim/timeline.hpp"
#include "sim_helpers.hpp"

namespace rrfp::test {
namespace {

const ReportRun& row(const Prediction& p, const std::string& label) {
  for (const ReportRun& r : p.runs)
    if (r.label == label) return r;
  ADD_FAILURE() << "no row " << label;
  return p.replayed;
}

TEST(Predict, RulesThatRunTheBackwardWholeReplayASplitStepWhole) {
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    const WorkModel split(config(4, 8, 1, true)), whole(config(4, 8, 1, false));
    RealizedWork w = realize(workload_preset("language"), split, 1, seed);
    w.coord_ns = 0;
    SimOptions opt;
    opt.arbiter.policy = Policy::Ready;
    opt.record = true;
    const Timeline t = timeline_of(simulate(split, make_hint("bfw", split), w, opt));
    const Prediction p = predict(build_run(t, split, 1, -1, "trace"), split.config(), 1);
    const std::string at = " @" + std::to_string(p.neutral_limit);
    // What simulate --replay --hint bf runs: the importer reads the step whole (W into B).
    const ImportedRun read_whole = build_run(t, whole, 1, -1, "trace");
    opt.arbiter.limit = p.neutral_limit;
    opt.record = false;
    const StepRecord bf = simulate(whole, make_hint("bf", whole), read_whole.work, opt);
    EXPECT_EQ(row(p, "ready bf" + at).metrics.makespan, bf.makespan) << "seed " << seed;
    EXPECT_FALSE(row(p, "ready bf" + at).cfg.split_backward);
    EXPECT_TRUE(row(p, "ready bfw" + at).cfg.split_backward);
    // Every rule under the step's split where that is asked for (--split-backward on).
    PredictOptions o;
    o.rules_split_as_they_run = false;
    const Prediction all = predict(build_run(t, split, 1, -1, "trace"), split.config(), 1, o);
    EXPECT_TRUE(row(all, "ready bf" + at).cfg.split_backward);
    EXPECT_LT(row(all, "ready bf" + at).metrics.makespan, bf.makespan) << "seed " << seed;
  }
}

// A simulated step written as rrfp's own trace and read back by predict.
Prediction predict_own_trace(const WorkModel& m, const std::string& hint, const RealizedWork& w,
                             const SimOptions& opt, const std::string& name,
                             std::int64_t* makespan) {
  ReportRun run;
  run.label = hint;
  run.cfg = m.config();
  run.result = simulate(m, make_hint(hint, m), w, opt);
  *makespan = run.result.makespan;
  const std::string path = ::testing::TempDir() + "rrfp_predict_" + name + ".json";
  write_chrome_trace(path, {run});
  Prediction p = predict(path, m.config(), w.tp, TraceOptions{});
  std::remove(path.c_str());
  return p;
}

// Agree's first round of coordination runs before any task starts: the trace records it as a
// wait from the step's start, and the twin replays it. The measured step began at the first
// task, so an exact replay read +3.6% (57.18 against 55.18 ms).
TEST(Predict, MeasuredStepStartsAtAgreesFirstRound) {
  const WorkModel m(config(2, 4));
  RealizedWork w = realize(workload_preset("language"), m, 2, 1);
  w.coord_ns = 2'000'000;
  SimOptions opt;
  opt.arbiter.policy = Policy::Fixed;
  opt.tp_protocol = TpProtocol::Agree;
  std::int64_t makespan = 0;
  const Prediction p = predict_own_trace(m, "1f1b", w, opt, "agree", &makespan);
  EXPECT_NEAR(static_cast<double>(p.measured.metrics.makespan), static_cast<double>(makespan), 1);
  EXPECT_NEAR(static_cast<double>(p.replayed.metrics.makespan), static_cast<double>(makespan), 1);
  EXPECT_NEAR(p.reproduction_error(), 0, 1e-9);
}

}  // namespace
}  // namespace rrfp::test

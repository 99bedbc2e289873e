// rrfp predict on recorded steps. Its rows are the rules as they run: on a step recorded with the
// split backward, a rule that runs the backward whole (bf under `split_backward` auto) is replayed
// so, with each W's time in its B, as `simulate --replay --hint bf` replays it. Its row used to be
// BF with deferred W tasks, 8-9% faster than the BF a user would get.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <iterator>

#include "core/error.hpp"
#include "expect_error.hpp"
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

// A loop's step read as a V-shape's: its order can never finish, which was told as a cyclic wait
// alone; the refusal names the placement taken.
TEST(Predict, AnOrderThatCannotFinishAtV2NamesThePlacementTaken) {
  const WorkModel loop(config(2, 4, 2));
  RealizedWork w = realize(workload_preset("language"), loop, 1, 1);
  SimOptions opt;
  opt.arbiter.policy = Policy::Fixed;
  opt.record = true;
  const Timeline t = timeline_of(simulate(loop, make_hint("interleaved-1f1b", loop), w, opt));
  const WorkModel vshape(config(2, 4, 2, false, Placement::VShape));
  EXPECT_ERROR(predict(build_run(t, loop, 1, -1, "trace"), vshape.config(), 1), HintError,
               "(or the trace was recorded with another shape: `placement` vshape was taken; "
               "give the one it ran with, and `pp`, `vpp`)");
}

// At TP 2, the BF row of a split step takes the collective of an F or B task: a training step's
// W has none, and the mean over every task, its W's 0 included, left each whole B two thirds of
// its collective (ready BF 15% short on a `train --tp 2` trace). A W recorded with no wait after
// it, as training records it, or with its ranks' waits for the group's slowest (the simulator's
// and the emulated runtime's W: its ranks meet, without a collective), the BF row is the same.
TEST(Predict, AWholeBackwardTakesTheCollectiveOfAnFOrBTask) {
  const WorkModel split(config(2, 4, 1, true)), whole(config(2, 4, 1, false));
  WorkloadParams params = workload_preset("uniform");
  params.tp_collective_us = 300;
  const RealizedWork w = realize(params, split, 2, 1);
  SimOptions opt;
  opt.arbiter.policy = Policy::Ready;
  opt.record = true;
  const StepRecord run = simulate(split, make_hint("bfw", split), w, opt);
  // Each rank's wait in its group's collective: from its compute's end to the group's.
  std::vector<std::int64_t> group_end(split.num_tasks(), 0);
  for (const TaskRecord& x : run.tasks)
    group_end[split.index(x.task)] =
        std::max(group_end[split.index(x.task)], x.compute_end + w.collective_after(x.task.kind));
  std::int64_t bf[2] = {0, 0};
  for (const bool w_waits : {true, false}) {
    Timeline t = timeline_of(run);
    for (size_t i = 0; i < t.tasks.size(); ++i)
      if (w_waits || t.tasks[i].task.kind != Kind::W)
        t.tasks[i].collective_us = static_cast<double>(group_end[split.index(run.tasks[i].task)] -
                                                       run.tasks[i].compute_end) /
                                   1e3;
    PredictOptions o;
    o.hints = {"bf"};
    const Prediction p = predict(build_run(t, split, 2, -1, "trace"), split.config(), 2, o);
    bf[w_waits] = row(p, "ready bf @" + std::to_string(p.neutral_limit)).metrics.makespan;
    // What simulate --replay --hint bf runs on the same step, read whole.
    SimOptions whole_opt = opt;
    whole_opt.record = false;
    whole_opt.arbiter.limit = p.neutral_limit;
    whole_opt.coordinate_fixed = false;
    EXPECT_EQ(bf[w_waits], simulate(whole, make_hint("bf", whole),
                                    build_run(t, whole, 2, -1, "trace").work, whole_opt)
                               .makespan)
        << "W waits in a collective: " << w_waits;
  }
  EXPECT_EQ(bf[0], bf[1]);
}

// A simulated step written as rrfp's own trace at `path`; its makespan.
std::int64_t write_own_trace(const WorkModel& m, const std::string& hint, const RealizedWork& w,
                             const SimOptions& opt, const std::string& path) {
  ReportRun run;
  run.label = hint;
  run.cfg = m.config();
  run.result = simulate(m, make_hint(hint, m), w, opt);
  write_chrome_trace(path, {run});
  return run.result.makespan;
}

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "rrfp_predict_" + name + ".json";
}

// Agree's first round of coordination runs before any task starts: the trace records it as a
// wait from the step's start, and the twin replays it. The measured step began at the first
// task, so an exact replay read +3.6% (57.18 against 55.18 ms).
TEST(Predict, MeasuredStepStartsAtAgreesFirstRound) {
  const WorkModel m(config(2, 4));
  RealizedWork w = realize(workload_preset("language"), m, 2, 1);
  w.coord_ns = 2'000'000;
  SimOptions opt;
  opt.arbiter.policy =
      Policy::Ready;  // ranked by 1F1B's list; a fixed list's ranks agree on nothing
  opt.tp_protocol = TpProtocol::Agree;
  const std::string path = temp_path("agree");
  const std::int64_t makespan = write_own_trace(m, "1f1b", w, opt, path);
  const Prediction p = predict(path, m.config(), 2, TraceOptions{});
  std::remove(path.c_str());
  EXPECT_NEAR(static_cast<double>(p.measured.metrics.makespan), static_cast<double>(makespan), 1);
  EXPECT_NEAR(static_cast<double>(p.replayed.metrics.makespan), static_cast<double>(makespan), 1);
  EXPECT_NEAR(p.reproduction_error(), 0, 1e-9);
}

// A step of a model whose forwards run in microbatch order (batch norm: rrfp.Pipeline orders
// them) is predicted with them ordered, as its trace records. Predicted without, adaptive
// saved 5% of this step, where rrfp, held to the ordering, runs it as BFW.
TEST(Predict, AStepRecordedWithOrderedForwardsIsPredictedWithThem) {
  PipelineConfig ordered = config(4, 8, 1, true);
  ordered.ordered_forwards = true;
  const WorkModel m(ordered);
  SimOptions opt;
  opt.arbiter.policy = Policy::Ready;
  const std::string path = temp_path("ordered");
  write_own_trace(m, "bfw", realize(workload_preset("multimodal"), m, 1, 3), opt, path);
  PredictOptions o;
  o.hints = {"bfw", "adaptive"};
  o.large_limit = 0;
  // The shape as read without the ordering (what predict infers): the trace's run says.
  const Prediction p = predict(path, config(4, 8, 1, true), 1, TraceOptions{}, o);
  EXPECT_TRUE(p.cfg.ordered_forwards);
  EXPECT_EQ(p.ordered_from, "trace");
  const std::string at = " @" + std::to_string(p.neutral_limit);
  EXPECT_TRUE(row(p, "ready adaptive" + at).cfg.ordered_forwards);
  EXPECT_EQ(row(p, "ready adaptive" + at).metrics.makespan, p.replayed.metrics.makespan);
  // Off where asked: the prediction the ordering forbids.
  o.ordered_forwards = false;
  const Prediction off = predict(path, config(4, 8, 1, true), 1, TraceOptions{}, o);
  EXPECT_EQ(off.ordered_from, "option");
  EXPECT_LT(row(off, "ready adaptive" + at).metrics.makespan, off.replayed.metrics.makespan);
  // A trace that does not say (older ones): off.
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string said = ",\"ordered_forwards\":true";
  ASSERT_NE(text.find(said), std::string::npos);
  for (size_t at_said; (at_said = text.find(said)) != std::string::npos;)
    text.erase(at_said, said.size());
  const ImportedRun older = import_trace_texts({{"older.json", text}}, m, 1);
  EXPECT_FALSE(older.ordered_forwards.has_value());
  o.ordered_forwards.reset();
  const Prediction unsaid = predict(older, config(4, 8, 1, true), 1, o);
  EXPECT_FALSE(unsaid.cfg.ordered_forwards);
  EXPECT_EQ(unsaid.ordered_from, "default");
  std::remove(path.c_str());
}

// Ordered forwards asked of a step that ran them out of order: its recorded order cannot be
// replayed so (the twin deadlocked, "run failed"), and the refusal says where.
TEST(Predict, RefusesOrderedForwardsTheRecordedStepBroke) {
  const WorkModel m(config(2, 4));
  SimOptions opt;
  opt.arbiter.policy = Policy::Fixed;
  const std::string path = temp_path("unordered");
  ListHint swapped = make_hint("1f1b", m).list();  // stage 0's first two forwards swapped
  std::swap(swapped.stages[0][0], swapped.stages[0][1]);
  Hint h;
  h.name = "swapped";
  h.body = swapped;
  ReportRun run;
  run.label = "swapped";
  run.cfg = m.config();
  run.result = simulate(m, h, realize(workload_preset("language"), m, 1, 1), opt);
  write_chrome_trace(path, {run});
  PredictOptions o;
  o.ordered_forwards = true;
  EXPECT_ERROR(predict(path, m.config(), 1, TraceOptions{}, o), InputError,
               "`ordered_forwards` on: the recorded step ran F c0 m1 before F c0 m0 on stage 0, "
               "so its forwards were not in microbatch order; give auto (the trace's own) or off");
  std::remove(path.c_str());
}

// "At that memory" by what a run held: at V = 2 a rule at the recorded order's largest D may
// pass it by up to V while a microbatch drains. Ready bf at limit 1, P=2 V=2 M=6 (`language`),
// held D 2; predicted at limit 2, bf reached 3 and was called the best at that memory (13.7%
// of the step saved). It is named as faster but holding more, and no rule is the best.
TEST(Predict, TheBestAtTheRecordedMemoryHeldNoMoreThanIt) {
  const WorkModel m(config(2, 6, 2));
  SimOptions opt;
  opt.arbiter.policy = Policy::Ready;
  opt.arbiter.limit = 1;
  const std::string path = temp_path("drain");
  write_own_trace(m, "bf", realize(workload_preset("language"), m, 1, 1), opt, path);
  PredictOptions o;
  o.hints = {"bf"};
  o.large_limit = 0;
  const Prediction p = predict(path, m.config(), 1, TraceOptions{}, o);
  std::remove(path.c_str());
  ASSERT_EQ(p.neutral_limit, 2);
  const ReportRun& bf = row(p, "ready bf @2");
  EXPECT_EQ(Prediction::largest_d(bf), 3);
  EXPECT_LT(bf.metrics.makespan, p.replayed.metrics.makespan);
  EXPECT_EQ(&p.best(), &p.replayed);
  EXPECT_EQ(p.faster_holding_more(), &bf);
  const std::string text = format_prediction(p, "drain.json");
  EXPECT_NE(text.find("At that memory no readiness-first rule beats the recorded order"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("ready bf @2 is faster (1.158x) but holds more: D 3 on its busiest stage"),
            std::string::npos)
      << text;
}

// A fixed order's TP ranks each follow it, so its trace shows no coordination; its rules ran
// without any (a trace of fixed 1F1B at T=2 with 100 us choices predicted ready BF 1.146x where
// it runs 1.111x). They take the simulator's default, or the latency and protocol given; a
// ready run's trace keeps what it measured.
TEST(Predict, TheRulesOfAFixedTpStepCoordinate) {
  const WorkModel m(config(4, 8));
  RealizedWork w = realize(workload_preset("language"), m, 2, 1);
  w.coord_ns = 100'000;
  SimOptions opt;
  opt.arbiter.policy = Policy::Fixed;
  opt.tp_protocol = TpProtocol::Agree;
  opt.record = true;
  const Timeline fixed = timeline_of(simulate(m, make_hint("1f1b", m), w, opt));
  PredictOptions o;
  o.hints = {"bf"};
  const Prediction by_default = predict(build_run(fixed, m, 2, -1, "trace"), m.config(), 2, o);
  EXPECT_EQ(by_default.coordination_from, "default");
  EXPECT_EQ(by_default.imported.work.coord_ns, 10'000);
  o.tp_protocol = TpProtocol::Agree;
  o.coord_us = 100;
  const Prediction given = predict(build_run(fixed, m, 2, -1, "trace"), m.config(), 2, o);
  EXPECT_EQ(given.coordination_from, "option");
  // The rule's row is the run itself: ready BF at the same limit, agree, 100 us.
  opt.arbiter.policy = Policy::Ready;
  opt.record = false;
  for (const int limit : {given.neutral_limit, 32}) {
    opt.arbiter.limit = limit;
    EXPECT_EQ(row(given, "ready bf @" + std::to_string(limit)).metrics.makespan,
              simulate(m, make_hint("bf", m), w, opt).makespan)
        << limit;
    EXPECT_LT(row(by_default, "ready bf @" + std::to_string(limit)).metrics.makespan,
              row(given, "ready bf @" + std::to_string(limit)).metrics.makespan);
  }
  // A ready run's trace shows its coordination: kept.
  opt.tp_protocol = TpProtocol::Leader;
  opt.record = true;
  const Timeline ready = timeline_of(simulate(m, make_hint("bf", m), w, opt));
  const Prediction kept = predict(build_run(ready, m, 2, -1, "trace"), m.config(), 2, {});
  EXPECT_EQ(kept.coordination_from, "trace");
  EXPECT_EQ(kept.imported.work.coord_ns, 100'000);
  // Its 100 us were a leader's hop, no agree round's: another protocol asked takes the default.
  PredictOptions agree;
  agree.tp_protocol = TpProtocol::Agree;
  EXPECT_EQ(predict(build_run(ready, m, 2, -1, "trace"), m.config(), 2, agree).coordination_from,
            "default");
  // Even work: a fixed list's followers start with their leaders, a lag of 0 that read as a
  // protocol of 0 us measured, and the rules ran with none.
  WorkloadParams uniform = workload_preset("uniform");
  uniform.tp_sigma = 0;  // every rank's work alike
  RealizedWork even = realize(uniform, m, 2, 1);
  opt.arbiter.policy = Policy::Fixed;
  const Timeline together = timeline_of(simulate(m, make_hint("1f1b", m), even, opt));
  const Prediction none = predict(build_run(together, m, 2, -1, "trace"), m.config(), 2, {});
  EXPECT_EQ(none.coordination_from, "default");
  EXPECT_EQ(none.imported.work.coord_ns, 10'000);
}

}  // namespace
}  // namespace rrfp::test

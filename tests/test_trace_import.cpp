// Replaying rrfp's own Chrome traces: trace -> replay -> the same makespan, to the nanosecond;
// and the errors a trace that does not fit the run gets.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "expect_error.hpp"
#include "report/experiment.hpp"
#include "report/report.hpp"
#include "sim/replay.hpp"
#include "sim/trace_import.hpp"
#include "sim_helpers.hpp"

namespace rrfp::test {
namespace {

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "rrfp_trace_" + name + ".json";
}

ReportRun simulated(const WorkModel& m, const std::string& hint, Policy p, const RealizedWork& w,
                    CommMode comm) {
  ReportRun r;
  r.label = hint;
  r.cfg = m.config();
  SimOptions opt;
  opt.arbiter.policy = p;
  opt.comm = comm;
  r.result = simulate(m, make_hint(hint, m), w, opt);
  r.offer_ack_ns = offer_ack_ns(w, comm);
  return r;
}

TEST(TraceImport, RoundTripGivesTheSameMakespanExactly) {
  struct Case {
    const char* workload;
    const char* hint;
    Policy policy;
    bool split;
    int tp;
    CommMode comm;
    int links = 0;  // the trace keeps each message's wait for a link
    // Payloads on their offers, and the acknowledgement's latency: the trace says so (replays
    // without them missed by up to 7%).
    bool offer = false;
  };
  const Case cases[] = {
      {"language", "1f1b", Policy::Fixed, false, 1, CommMode::Async},
      {"multimodal", "bf", Policy::Ready, false, 1, CommMode::Async},
      {"paper", "bfw", Policy::Ready, true, 1, CommMode::Async},
      {"jitter:J3", "adaptive", Policy::Ready, true, 1, CommMode::Async},
      {"paper-comm", "1f1b", Policy::Fixed, false, 1, CommMode::Blocking},
      {"multimodal", "bf", Policy::Ready, false, 2, CommMode::Async},
      {"language", "bf", Policy::Ready, false, 1, CommMode::Async, 1},
      {"paper", "1f1b", Policy::Fixed, true, 2, CommMode::Async, 1},
      {"paper-comm", "bfw", Policy::Ready, true, 1, CommMode::Async, 2},
      {"paper-comm", "1f1b", Policy::Fixed, false, 1, CommMode::Blocking, 2},
      {"paper-comm", "1f1b", Policy::Fixed, false, 1, CommMode::Blocking, 0, true},
      {"language", "bfw", Policy::Ready, true, 1, CommMode::Blocking, 0, true},
      {"paper", "zb-h1", Policy::Fixed, true, 1, CommMode::Blocking, 1, true}};
  for (const Case& c : cases)
    for (std::uint64_t seed = 1; seed <= 3; ++seed) {
      WorkModel m(config(4, 12, 1, c.split));
      WorkloadParams params = workload_preset(c.workload);
      params.comm_links = c.links;
      params.comm_offer_payload = c.offer;
      if (c.tp > 1) params.tp_collective_us = 150.0 * seed;  // measured back from the trace
      const RealizedWork w = realize(params, m, c.tp, seed);
      const ReportRun run = simulated(m, c.hint, c.policy, w, c.comm);
      const std::string path = temp_path(std::string(c.workload).substr(0, 5) + c.hint);
      write_chrome_trace(path, {run});
      RealizedWork back = read_replay_file(path, m, c.tp);
      // TP: the collective's own time, from the ranks' waits in it (it was left out: 0).
      EXPECT_NEAR(static_cast<double>(back.collective_ns), static_cast<double>(w.collective_ns), 1)
          << c.workload << " " << c.hint << " seed " << seed;
      back.collective_ns = w.collective_ns;  // to the ns, for the makespan's exact equality
      back.coord_ns = w.coord_ns;
      EXPECT_EQ(back.compute_ns, w.compute_ns) << c.workload << " " << c.hint;
      EXPECT_EQ(simulated(m, c.hint, c.policy, back, c.comm).result.makespan, run.result.makespan)
          << c.workload << " " << c.hint << " seed " << seed;
      // The order it ran in, replayed with the fixed policy, is the same step again; but for a
      // ready run under blocking, which accepted its offers as they came where a fixed order
      // posts its receives one at a time (predict replays that one under the ready policy).
      if (c.tp == 1 && !(c.policy == Policy::Ready && c.comm == CommMode::Blocking)) {
        const ImportedRun in = import_trace(path, m, 1);
        EXPECT_NEAR(static_cast<double>(in.measured_ns), static_cast<double>(run.result.makespan),
                    1);
        Hint recorded;
        recorded.name = "recorded";
        recorded.body = in.order;
        SimOptions opt;
        opt.arbiter.policy = Policy::Fixed;
        opt.comm = c.comm;
        EXPECT_EQ(simulate(m, recorded, back, opt).makespan, run.result.makespan)
            << c.workload << " " << c.hint << " seed " << seed << ": recorded order";
      }
      std::remove(path.c_str());
    }
}

// A trace's runs are its steps in the order it records them (its runs in the report's order):
// they were numbered by their labels' order, so a table's "fixed 1f1b (async)" was step 0 and
// its "(blocking)", recorded first, step 1, and --step replayed another run than it said.
TEST(TraceImport, ATracesRunsAreStepsInTheOrderItRecordsThem) {
  WorkModel m(config(2, 4, 1, false));
  std::vector<ReportRun> runs;
  for (const char* label : {"zeta", "alpha", "mid"}) {
    runs.push_back(simulated(m, "1f1b", Policy::Fixed,
                             realize(workload_preset("language"), m, 1, runs.size() + 1),
                             CommMode::Async));
    runs.back().label = label;
  }
  const std::string path = temp_path("order");
  write_chrome_trace(path, runs);
  for (int step = 0; step < 3; ++step) {
    TraceOptions o;
    o.step = step;
    EXPECT_EQ(import_trace(path, m, 1, o).measured_ns, runs[step].result.makespan) << step;
  }
  EXPECT_EQ(import_trace(path, m, 1).measured_ns, runs[0].result.makespan) << "the default";
  std::remove(path.c_str());
}

TEST(TraceImport, NamesWhatIsMissingPerStage) {
  WorkModel m(config(2, 4));
  const RealizedWork w = realize(workload_preset("language"), m, 1, 1);
  ReportRun run = simulated(m, "1f1b", Policy::Fixed, w, CommMode::Async);
  // Drop B c1 m3 from stage 1 and every W-less task is still there: one named gap.
  std::erase_if(run.result.tasks, [](const TaskRecord& t) {
    return t.task == TaskId{Kind::B, 1, 3};
  });
  const std::string path = temp_path("missing");
  write_chrome_trace(path, {run});
  try {
    read_replay_file(path, m, 1);
    FAIL() << "an incomplete trace was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("stage 1: 1 (B c1 m3)"), std::string::npos) << e.what();
  }
  // A larger shape than the trace's: stage 2 is missing altogether.
  WorkModel bigger(config(3, 4));
  EXPECT_ERROR(
      read_replay_file(path, bigger, 1), InputError,
      "the rrfp timeline lacks tasks this shape needs: stage 1: 1 (B c1 m3); stage 2: 8 (F c2 m0");
  std::remove(path.c_str());
}

// A split step replayed with the backward whole, one of its W tasks missing: refused naming it
// (its B was replayed short of the W's work, exit 0), and passed over for a complete step.
TEST(TraceImport, AFoldedStepLackingAWIsNotReplayedShort) {
  WorkModel split(config(2, 4, 1, true)), whole(config(2, 4));
  const RealizedWork w = realize(workload_preset("language"), split, 1, 1);
  ReportRun cut = simulated(split, "bfw", Policy::Ready, w, CommMode::Async);
  ReportRun complete = cut;
  complete.label = "bfw again";  // a run of its own: the trace's next step
  std::erase_if(cut.result.tasks, [](const TaskRecord& t) {
    return t.task == TaskId{Kind::W, 1, 2};
  });
  const std::string path = temp_path("folded-cut");
  write_chrome_trace(path, {cut});
  EXPECT_ERROR(read_replay_file(path, whole, 1), InputError,
               "no duration for task W c1 m2, where other W tasks have one");
  write_chrome_trace(path, {cut, complete});
  const RealizedWork read = read_replay_file(path, whole, 1);
  const int b = whole.index(TaskId{Kind::B, 1, 2});
  EXPECT_EQ(read.compute(0, b), w.compute(0, split.index(TaskId{Kind::B, 1, 2})) +
                                    w.compute(0, split.index(TaskId{Kind::W, 1, 2})));
  std::remove(path.c_str());
}

// A folder of a run's traces: files of different stages make one step (a trace per process of a
// job); a file that gives a stage the step already has starts its next step (every process of
// a Python pipeline records the whole step; steps saved a file each), which --step picks. Such
// a folder was refused, every task seen twice, and --step 1 found no step 1.
TEST(TraceImport, AFolderMakesAStepOfItsStagesAndAnotherOfAStageGivenAgain) {
  namespace fs = std::filesystem;
  WorkModel m(config(4, 8));
  const RealizedWork w = realize(workload_preset("multimodal"), m, 1, 2);
  const ReportRun run = simulated(m, "bf", Policy::Ready, w, CommMode::Async);
  const std::string whole = temp_path("folder-whole");
  write_chrome_trace(whole, {run});
  nlohmann::json doc;
  std::ifstream(whole) >> doc;
  const fs::path dir = ::testing::TempDir() + "rrfp_trace_folder";
  fs::remove_all(dir);
  fs::create_directories(dir / "stages");
  fs::create_directories(dir / "copies");
  for (int half = 0; half < 2; ++half) {  // stages 0-1 in a.json, 2-3 in b.json
    nlohmann::json part = doc;
    auto& ev = part["traceEvents"];
    ev.erase(std::remove_if(ev.begin(), ev.end(),
                            [&](const nlohmann::json& e) {
                              return e.contains("pid") && e["pid"].get<int>() / 2 != half;
                            }),
             ev.end());
    std::ofstream(dir / "stages" / (half ? "b.json" : "a.json")) << part.dump();
    fs::copy_file(whole, dir / "copies" / (half ? "rank1.json" : "rank0.json"));
  }
  const ImportedRun one = import_trace(whole, m, 1);
  const ImportedRun merged = import_trace((dir / "stages").string(), m, 1);
  EXPECT_EQ(merged.work.compute_ns, one.work.compute_ns);
  EXPECT_EQ(merged.measured_ns, one.measured_ns);
  TraceOptions second;
  second.step = 1;
  EXPECT_ERROR(import_trace((dir / "stages").string(), m, 1, second), InputError,
               "has no step 1; it has 0");
  for (const int step : {-1, 0, 1}) {
    TraceOptions o;
    o.step = step;
    const ImportedRun copy = import_trace((dir / "copies").string(), m, 1, o);
    EXPECT_EQ(copy.work.compute_ns, one.work.compute_ns) << "step " << step;
    EXPECT_EQ(copy.step, step < 0 ? 0 : step);
  }
  // Two steps of two processes each, named process first: each file joins the earliest step
  // that lacks its stages, whatever the names' order (a file joined the latest step, which
  // made step 1 of one step's first stages and the other's last: a mix, replayed silently).
  const RealizedWork w2 = realize(workload_preset("multimodal"), m, 1, 7);
  const std::string other = temp_path("folder-other");
  write_chrome_trace(other, {simulated(m, "bf", Policy::Ready, w2, CommMode::Async)});
  fs::create_directories(dir / "steps");
  for (const char* file : {"a.json", "b.json"}) {
    const std::string name = file;
    fs::copy_file(dir / "stages" / name,
                  dir / "steps" / ("rank" + name.substr(0, 1) + "-step0.json"));
    nlohmann::json part;
    std::ifstream(dir / "stages" / name) >> part;
    nlohmann::json second;
    std::ifstream(other) >> second;
    auto& ev = second["traceEvents"];
    const int half = name == "b.json";
    ev.erase(std::remove_if(ev.begin(), ev.end(),
                            [&](const nlohmann::json& e) {
                              return e.contains("pid") && e["pid"].get<int>() / 2 != half;
                            }),
             ev.end());
    std::ofstream(dir / "steps" / ("rank" + name.substr(0, 1) + "-step1.json")) << second.dump();
  }
  const ImportedRun two = import_trace(other, m, 1);
  for (const int step : {0, 1}) {
    TraceOptions o;
    o.step = step;
    const ImportedRun got = import_trace((dir / "steps").string(), m, 1, o);
    EXPECT_EQ(got.work.compute_ns, (step == 0 ? one : two).work.compute_ns) << "step " << step;
  }
  std::remove(other.c_str());
  fs::remove_all(dir);
  std::remove(whole.c_str());
}

// A run's own trace with every task of stage 0 moved to ts 0: they overlap on one rank.
TEST(TraceImport, RefusesTasksOfOneRankThatOverlap) {
  WorkModel m(config(2, 4));
  const std::string path = temp_path("overlap");
  ReportRun run = simulated(m, "1f1b", Policy::Fixed, realize(workload_preset("language"), m, 1, 1),
                            CommMode::Async);
  for (TaskRecord& t : run.result.tasks)
    if (t.stage == 0) {
      t.compute_end -= t.start;
      t.end -= t.start;
      t.start = 0;
    }
  write_chrome_trace(path, {run});
  try {
    read_replay_file(path, m, 1);
    FAIL() << "overlapping tasks were accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("overlap on stage 0"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

// Epoch clocks (about 1.7e15 us, what Kineto writes: every such trace was refused at 1e13) are
// read, measured from the step's earliest event; a step spanning more than 1e13 us is not.
TEST(TraceImport, ReadsEpochClocksButBoundsAStepsSpan) {
  WorkModel m(config(2, 4));
  const RealizedWork w = realize(workload_preset("language"), m, 1, 1);
  ReportRun run = simulated(m, "1f1b", Policy::Fixed, w, CommMode::Async);
  const std::int64_t epoch_ns = 1712667379482786000;  // 2024-04-09 in ns, a whole us
  for (TaskRecord& t : run.result.tasks) {
    t.start += epoch_ns;
    t.compute_end += epoch_ns;
    t.end += epoch_ns;
  }
  const std::string path = temp_path("epoch");
  write_chrome_trace(path, {run});
  const ImportedRun in = import_trace(path, m, 1);
  // A double holds 1.7e15 us to 0.25 us: each start is within that of the recorded one.
  EXPECT_NEAR(static_cast<double>(in.measured_ns), static_cast<double>(run.result.makespan), 250);
  EXPECT_EQ(in.start_ns.front(), 0);
  std::remove(path.c_str());

  const std::string at =
      "[{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": 0, "
      "\"args\": {\"name\": \"r / stage 0\"}},";
  auto task = [](int mb, const char* ts) {
    return std::string("{\"ph\": \"X\", \"pid\": 0, \"tid\": 0, \"ts\": ") + ts +
           ", \"dur\": 1, \"args\": {\"kind\": \"F\", \"chunk\": 0, \"microbatch\": " +
           std::to_string(mb) + "}}";
  };
  EXPECT_ERROR(
      parse_chrome_trace(at + task(0, "1.7e15") + "," + task(1, "1.72e15") + "]",
                         WorkModel(config(1, 2)), 1, "t.json"),
      InputError,
      "t.json (run 'r'): its events span 2e+13 us (from ts 1700000000000000); at most 1e13 (us) "
      "is read");
}

TEST(TraceImport, RefusesWhatIsNotAnRrfpTrace) {
  WorkModel m(config(2, 2));
  auto refused = [&](const std::string& text, const std::string& want) {
    try {
      parse_chrome_trace(text, m, 1, "t.json");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  refused("{\"x\": 1}", "without `traceEvents`");
  refused("{\"traceEvents\": 3}", "is not an array");
  refused("[{\"ph\": \"X\", \"name\": \"aten::mm\", \"pid\": 1, \"dur\": 5}]",
          "no mapping recognizes this trace");
  refused(
      "[{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": 0, \"args\": {\"name\": \"r / stage "
      "0\"}},"
      "{\"ph\": \"X\", \"pid\": 0, \"tid\": 0, \"dur\": -1, \"args\": {\"kind\": \"F\", "
      "\"chunk\": 0, \"microbatch\": 0}}]",
      "field \"dur\" is negative");
  // Clock readings past 4e15 us (1e300 ended in a deadlock line of 758 characters), durations
  // past 1e13 us, and tasks of one rank that overlap (all at ts 0 were accepted).
  const std::string stage0 =
      "[{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": 0, \"args\": {\"name\": \"r / stage "
      "0\"}},";
  const std::string f0 = "\"args\": {\"kind\": \"F\", \"chunk\": 0, \"microbatch\": 0}}";
  refused(stage0 + "{\"ph\": \"X\", \"pid\": 0, \"tid\": 0, \"ts\": 1e300, \"dur\": 1, " + f0 + "]",
          "field \"ts\" is 1e+300; at most 4e15 (us since the epoch, the year 2096) is read");
  refused(
      stage0 + "{\"ph\": \"X\", \"pid\": 0, \"tid\": 0, \"ts\": 9.2e18, \"dur\": 1, " + f0 + "]",
      "field \"ts\" is 9.2e+18; at most 4e15");
  refused(stage0 + "{\"ph\": \"X\", \"pid\": 0, \"tid\": 0, \"ts\": 5, \"dur\": 2e13, " + f0 + "]",
          "field \"dur\" is 20000000000000.0; at most 1e13 (us) is read");
  refused(
      "[{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": 0, \"args\": {\"name\": \"r / stage "
      "0\"}},"
      "{\"ph\": \"X\", \"pid\": 0, \"tid\": 0, \"dur\": 1, \"args\": {\"kind\": \"F\", "
      "\"chunk\": 1, \"microbatch\": 0}}]",
      "runs on stage 1, not 0; if the trace was recorded with another shape, give that one "
      "(`pp`, `vpp`, `microbatches`, `placement`)");
  // A task without ts was put at 0 (first in its stage's order: 136.46 ms replayed as 147.48);
  // one without kind was skipped, and the step refused for lacking it.
  refused(stage0 + "{\"ph\": \"X\", \"pid\": 0, \"tid\": 0, \"dur\": 1, " + f0 + "]",
          "t.json: event 2: field \"ts\" is missing or not a number");
  refused(stage0 +
              "{\"ph\": \"X\", \"pid\": 0, \"tid\": 0, \"ts\": 0, \"dur\": 1, \"args\": "
              "{\"chunk\": 0, \"microbatch\": 0}}]",
          "t.json: event 2: field \"kind\" is missing (F, B or W)");
  refused(
      "[{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": 0, \"args\": {\"name\": \"r / stage "
      "0\"}},"
      "{\"ph\": \"X\", \"pid\": 0, \"tid\": 3, \"ts\": 0, \"dur\": 1, \"args\": {\"kind\": \"F\", "
      "\"chunk\": 0, \"microbatch\": 0}}]",
      "tp rank 3 >= `tp` 1");
  // A run's settings: its ordering of forwards and payloads on offers true or false, the
  // acknowledgement's latency a time, each the same on every stage.
  auto stage = [](int s, const std::string& field, const std::string& value) {
    return "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": " + std::to_string(s) +
           ", \"args\": {\"name\": \"r / stage " + std::to_string(s) + "\", \"" + field +
           "\": " + value + "}}";
  };
  refused("[" + stage(0, "ordered_forwards", "1") + "]",
          "t.json: event 1: field \"ordered_forwards\" is not true or false: 1");
  refused("[" + stage(0, "ordered_forwards", "true") + "," + stage(1, "ordered_forwards", "false") +
              "]",
          "t.json: event 2: field \"ordered_forwards\" is false, but another stage of run 'r' "
          "says true");
  refused("[" + stage(0, "offer_payload", "\"yes\"") + "]",
          "t.json: event 1: field \"offer_payload\" is not true or false: \"yes\"");
  refused("[" + stage(0, "offer_ack_us", "-1") + "]",
          "t.json: event 1: field \"offer_ack_us\" is not a time from 0 to 1e+09 us: -1");
  refused("[" + stage(0, "offer_ack_us", "2.5") + "," + stage(1, "offer_ack_us", "3") + "]",
          "t.json: event 2: field \"offer_ack_us\" is 3, but another stage of run 'r' says 2.5");
}

// One stray microbatch id in rrfp's own trace made a shape of millions of microbatches, and the
// error blamed --pp, --vpp and --microbatches, flags never given: it names the event.
TEST(TraceImport, ShapeIsBoundedByTheIdsTheTraceHolds) {
  WorkModel m(config(2, 2));
  const ReportRun run = simulated(m, "1f1b", Policy::Fixed,
                                  realize(workload_preset("language"), m, 1, 1), CommMode::Async);
  const std::string path = temp_path("stray-id");
  write_chrome_trace(path, {run});
  nlohmann::json doc;
  std::ifstream(path) >> doc;
  auto& events = doc["traceEvents"];
  size_t at = 0;
  while (!events[at].contains("args") || !events[at]["args"].contains("microbatch"))
    ++at;
  events[at]["args"]["microbatch"] = 5000000;
  std::ofstream(path) << doc.dump();
  EXPECT_ERROR(infer_trace_config(path, 1), InputError,
               "rrfp_trace_stray-id.json: event " + std::to_string(at + 1) +
                   ": microbatch 5000000: a complete step needs all 5000001 of them, but the "
                   "trace's events carry 3 (an id out of range?)");
  // A field of the wrong JSON type ended in nlohmann's type_error ("internal error").
  events[at]["args"]["microbatch"] = 0;
  events[at]["args"]["kind"] = 3;
  std::ofstream(path) << doc.dump();
  EXPECT_ERROR(infer_trace_config(path, 1), InputError,
               "rrfp_trace_stray-id.json: event " + std::to_string(at + 1) +
                   ": field \"args.kind\" must be a string (or absent), got 3");
  events[at]["ph"] = 88;
  std::ofstream(path) << doc.dump();
  EXPECT_ERROR(import_trace(path, m, 1), InputError,
               "rrfp_trace_stray-id.json: event " + std::to_string(at + 1) +
                   ": field \"ph\" must be a string (or absent), got 88");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace rrfp::test

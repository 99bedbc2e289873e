// The trace importers' replays beyond one format: messages a trace does not time, seen from
// when their consumers started; a CSV of several steps; and every importer under mutated input.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include "core/error.hpp"
#include "expect_error.hpp"
#include "mutate.hpp"
#include "report/predict.hpp"
#include "report/report.hpp"
#include "sim/replay.hpp"
#include "sim/timeline.hpp"
#include "sim/trace_import.hpp"
#include "sim/workload.hpp"
#include "trace_fixtures.hpp"

namespace rrfp::test {
namespace {

// Jitter on recorded durations (simulate --replay TRACE --workload jitter:Jk) stalls a split
// backward as a whole one, as realize() draws it: each rank's jittered B + W is the jittered B
// of the same durations without the split. A split B's stall was sized by B alone, and BFW came
// out 1.25x faster than fixed 1F1B at P=1 M=1 under J3, where nothing can be scheduled.
TEST(TraceReplays, JitterOnRecordedDurationsStallsASplitBackwardAsAWholeOne) {
  WorkModel whole(config(4, 8, 2)), split(config(4, 8, 2, true));
  int hit = 0;
  for (int j = 1; j <= 3; ++j)
    for (int tp : {1, 2})
      for (std::uint64_t seed = 1; seed <= 3; ++seed) {
        const WorkloadParams calm = workload_preset("language");
        RealizedWork a = realize(calm, whole, tp, seed), b = realize(calm, split, tp, seed);
        const RealizedWork before = a;
        apply_jitter(a, whole, jitter_level(j), seed);
        apply_jitter(b, split, jitter_level(j), seed);
        for (int i = 0; i < whole.num_tasks(); ++i) {
          const TaskId t = whole.task(i);
          if (t.kind != Kind::B) continue;
          for (int r = 0; r < tp; ++r) {
            const std::int64_t parts =
                b.compute(r, split.index(t)) + b.compute(r, split.index({Kind::W, t.chunk, t.mb}));
            EXPECT_NEAR(parts, a.compute(r, i), 2)
                << "J" << j << " tp " << tp << " " << to_string(t);
            hit += a.compute(r, i) > before.compute(r, i);
          }
        }
      }
  EXPECT_GT(hit, 20) << "jitter must hit some backwards";
}

// A trace without message times (rrfp's own measured runs): a consumer idle until its
// producer ended shows what the message took; the rest get the median of those seen.
TEST(TraceFormats, MessagesAreSeenFromWhenConsumersStarted) {
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    WorkModel m(config(4, 8));
    WorkloadParams wp = workload_preset("language");
    wp.comm_latency_us = 300;  // every message 300 us: the median is exact too
    wp.comm_bandwidth_gbps = 0;
    wp.comm_sigma = 0;
    RealizedWork w = realize(wp, m, 1, seed);
    const StepRecord r = simulated(m, "1f1b", Policy::Fixed, w);
    Timeline t = timeline_of(r);
    for (TimelineTask& x : t.tasks)
      x.send_us = -1;  // as a measured run records it
    const ImportedRun in = build_run(t, m, 1, -1, "run");
    EXPECT_GT(in.messages_inferred, in.messages / 2) << "1F1B waits for most messages";
    for (int i = 0; i < w.num_tasks; ++i)
      EXPECT_EQ(in.work.message(0, i), w.message(0, i)) << to_string(m.task(i));
    const Prediction p = predict(in, m.config(), 1);
    EXPECT_NEAR(static_cast<double>(p.replayed.metrics.makespan), static_cast<double>(r.makespan),
                2);
    // --message-us instead: every untimed message takes it, nothing is inferred.
    const ImportedRun fixed = build_run(t, m, 1, 0, "run");
    EXPECT_EQ(fixed.messages_inferred, 0);
    EXPECT_LT(predict(fixed, m.config(), 1).replayed.metrics.makespan, r.makespan);
  }
}

// durations.csv of several steps (rrfp train): each step reads back; the last by default.
TEST(TraceFormats, ReplayCsvHoldsSeveralSteps) {
  WorkModel m(config(2, 4));
  const RealizedWork a = realize(workload_preset("language"), m, 1, 1);
  const RealizedWork b = realize(workload_preset("language"), m, 1, 2);
  const std::string text = replay_csv(m, {{3, a}, {4, b}});
  auto near = [](const RealizedWork& x, const RealizedWork& y) {
    for (size_t i = 0; i < x.compute_ns.size(); ++i)
      if (std::abs(x.compute_ns[i] - y.compute_ns[i]) > 1 ||
          std::abs(x.message_ns[i] - y.message_ns[i]) > 1)
        return false;
    return true;
  };
  EXPECT_TRUE(near(parse_replay_csv(text, m, 1, "d.csv", 3), a));
  EXPECT_TRUE(near(parse_replay_csv(text, m, 1, "d.csv"), b));
  EXPECT_FALSE(near(a, b));
  // A missing step is told with the steps there are: below the first it said "its last is 4".
  for (const int missing : {7, 2})
    try {
      parse_replay_csv(text, m, 1, "d.csv", missing);
      ADD_FAILURE() << "a missing step was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("has no step " + std::to_string(missing) +
                                           "; it has steps 3 to 4"),
                std::string::npos)
          << e.what();
    }
  // With a step missing between them, their count (as "3 to 5" the range read as every step).
  EXPECT_ERROR(parse_replay_csv(replay_csv(m, {{3, a}, {5, b}}), m, 1, "g.csv", 4), InputError,
               "`step`: g.csv has no step 4; it has 2 steps, from 3 to 5");
  // A step written "04" is step 4 (matched as text, it was never found: "no step 4; its last
  // is 4").
  std::string padded;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    padded += (line.rfind("4,", 0) == 0 ? "0" : "") + line + "\n";
  ASSERT_NE(padded, text + "\n");
  EXPECT_TRUE(near(parse_replay_csv(padded, m, 1, "d.csv", 4), b));
  EXPECT_TRUE(near(parse_replay_csv(padded, m, 1, "d.csv"), b));
  // An editor's byte order mark first: it was named as part of the first column ("unknown
  // column '\xEF\xBB\xBFstep'").
  EXPECT_TRUE(near(parse_replay_csv("\xEF\xBB\xBF" + text, m, 1, "d.csv"), b));
}

// A step whose recorded durations are all zero: predict printed "-nanx" speedups and a twin
// error of -100.0%; it shows "-", as `simulate` does, and JSON null.
TEST(TraceReplays, AStepOfNoTimePredictsNoRatios) {
  const std::string zero =
      R"({"traceEvents": [{"ph": "X", "name": "Forward 0", "ts": 0, "dur": 0, "pid": 1, "tid": 1},
          {"ph": "X", "name": "Backward 0", "ts": 20, "dur": 0, "pid": 1, "tid": 1}]})";
  const PipelineConfig c = config(1, 1);
  const Prediction p = predict(import_trace_texts({{"z.json", zero}}, WorkModel(c), 1), c, 1);
  const std::string text = format_prediction(p, "z.json");
  EXPECT_EQ(text.find("nan"), std::string::npos) << text;
  EXPECT_EQ(text.find("-100.0%"), std::string::npos) << text;
  EXPECT_NE(text.find("ms  (- = twin / measured - 1: how well the twin reproduces the step)"),
            std::string::npos)
      << text;
  const nlohmann::json j = prediction_json(p, "z.json");
  EXPECT_TRUE(j["reproduction_error"].is_null()) << j.dump();
  ASSERT_FALSE(j["predictions"].empty());
  for (const auto& r : j["predictions"])
    EXPECT_TRUE(r["speedup_vs_recorded"].is_null()) << r.dump();
}

// The trace importers and the stepped CSV under the suite's mutation fuzzer (mutate.hpp): rrfp's
// own trace, Kineto's layout (one file of two mutated, or its gzip bytes), Megatron's timers and
// a CSV of two steps, each edited at random, must be accepted or refused with an InputError,
// never crash or throw anything else. RRFP_FUZZ_ITERS=N runs N inputs.
TEST(Fuzz, TraceImportersSurviveMutatedTraces) {
  WorkModel m(config(2, 4, 1, true));
  RealizedWork w = realize(workload_preset("paper"), m, 1, 3);
  const StepRecord r = simulated(m, "bfw", Policy::Ready, w);
  const std::string own = rrfp_trace_text(m, r, "rrfp-fuzz-trace.json");
  const auto kineto = kineto_files(r, m, false), kineto_gz = kineto_files(r, m);
  const std::string megatron = megatron_file(r, m, 1, 2, false);
  const std::string csv = replay_csv(m, {{0, w}, {1, w}});
  FuzzTally tally;
  const int n = fuzz_iterations(3000);
  for (int i = 0; i < n; ++i) {
    const std::string at = " input " + std::to_string(i);
    tally.attempt("rrfp" + at, [&] { import_trace_texts({{"t.json", mutate(own, 91, i)}}, m, 1); });
    tally.attempt("kineto" + at, [&] {
      auto files = i % 4 == 0 ? kineto_gz : kineto;
      files[i % 2].second = mutate(files[i % 2].second, 92, i);
      import_trace_texts(files, m, 1);
    });
    tally.attempt("megatron" + at, [&] {
      import_trace_texts({{"m.json", mutate(megatron, 93, i)}}, m, 1);
    });
    tally.attempt("csv" + at,
                  [&] { parse_replay_csv(mutate(csv, 94, i), m, 1, "fuzz", i % 3 - 1); });
  }
  std::printf("fuzzed traces and CSVs: %d inputs, %d accepted, %d refused\n", 4 * n, tally.accepted,
              tally.refused);
  EXPECT_GT(tally.refused, n);  // most edits break something
  EXPECT_GT(tally.accepted, 0);
}

// Each span is the step's that holds it, [start, end): at the boundary of two steps the later
// one's, at the end of the last step still that one's, between steps none's; of overlapping
// steps the least numbered's. A span's step is found by a binary search where the steps are
// disjoint (it scanned them all for every span: 17 s for a trace of 40,000 steps), by a scan
// where they overlap.
TEST(TraceFormats, ASpanIsTheStepsThatHoldsIt) {
  WorkModel m(config(1, 1));
  auto span = [](const char* name, int ts, int dur) {
    return std::string(R"(, {"ph": "X", "name": ")") + name + R"(", "ts": )" + std::to_string(ts) +
           R"(, "dur": )" + std::to_string(dur) + R"(, "pid": 1, "tid": 1})";
  };
  auto durations = [&](const std::string& events, int step) {
    TraceOptions o;
    o.step = step;
    const std::string text = R"({"traceEvents": [)" + events.substr(1) + "]}";
    return import_trace_texts({{"t.json", text}}, m, 1, o).work.compute_ns;
  };
  const std::string disjoint = span("ProfilerStep#1", 0, 100) + span("ProfilerStep#2", 100, 100) +
                               span("Forward 0", 0, 11) + span("Backward 0", 50, 12) +
                               span("Forward 0", 100, 21) +   // at the boundary: step 2's
                               span("Backward 0", 200, 22) +  // at the last step's end
                               span("Forward 0", 300, 31);    // after every step: none's
  EXPECT_EQ(durations(disjoint, 1), (std::vector<std::int64_t>{11'000, 12'000}));
  EXPECT_EQ(durations(disjoint, 2), (std::vector<std::int64_t>{21'000, 22'000}));
  const std::string overlapping = span("ProfilerStep#2", 0, 100) + span("ProfilerStep#1", 50, 100) +
                                  span("Forward 0", 60, 11) + span("Backward 0", 80, 12) +
                                  span("Forward 0", 10, 21) + span("Backward 0", 40, 22);
  EXPECT_EQ(durations(overlapping, 1), (std::vector<std::int64_t>{11'000, 12'000}));
  EXPECT_EQ(durations(overlapping, 2), (std::vector<std::int64_t>{21'000, 22'000}));
}

// Events that time a task but were skipped unsaid, the step replayed without them where it was
// complete (or another step replayed in its place): a profiler's task label gone wrong, a task
// timed by begin and end events, and a task of rrfp's trace on a process that is no stage.
TEST(TraceFormats, RefusesATaskEventItWouldLeaveOut) {
  WorkModel m(config(1, 1));
  for (const char* label : {"PP:0F0junk", "PP:0F99999999999", "PP:F0", "PP:0F-1", "PP:0B 0"})
    EXPECT_ERROR(import_trace_texts(
                     {{"t.json", torch_one_rank(std::string(R"(, {"ph": "X", )") + R"("name": ")" +
                                                label + R"(", "ts": 90, "dur": 1})")}},
                     m, 1),
                 InputError, std::string("t.json: event 3: span '") + label + "' is no task label");
  EXPECT_NO_THROW(import_trace_texts(
      {{"t.json", torch_one_rank(R"(, {"ph": "X", "name": "PP:0SEND_F0", "ts": 90, "dur": 1})")}},
      m, 1));  // another action
  EXPECT_ERROR(import_trace_texts({{"t.json", torch_one_rank(R"(, {"ph": "B", "name": "PP:0F0", )"
                                                             R"("ts": 90, "pid": 1, "tid": 1})")}},
                                  m, 1),
               InputError, "t.json: event 3: task span 'PP:0F0' has ph \"B\"");
  WorkModel two(config(2, 2));
  RealizedWork w = realize(workload_preset("language"), two, 1, 1);
  json doc = json::parse(rrfp_trace_text(two, simulated(two, "1f1b", Policy::Fixed, w), "x.json"));
  json& events = doc.is_array() ? doc : doc["traceEvents"];
  for (const json& e : events)
    if (e.value("ph", "") == "X" && e.contains("args") && e["args"].contains("kind")) {
      json stray = e;
      stray["pid"] = 12345;
      events.push_back(stray);
      break;
    }
  EXPECT_ERROR(import_trace_texts({{"x.json", doc.dump()}}, two, 1), InputError,
               "a task on pid 12345, which no process_name event names a stage of");
}

// Megatron's thread names give a rank's pp and tp, and an event's args pp_rank / tp_rank may
// too: where both do and disagree the trace is refused (the args overrode the name unsaid, the
// stages swapped); where they agree it reads as before.
TEST(TraceFormats, MegatronRanksOfThreadAndArgsMustAgree) {
  WorkModel m(config(2, 4));
  RealizedWork w = realize(workload_preset("language"), m, 1, 1);
  json doc = json::parse(megatron_file(simulated(m, "1f1b", Policy::Fixed, w), m, 1, 0, false));
  json& events = doc.is_array() ? doc : doc["traceEvents"];
  for (json& e : events)  // tid 40 is pp 0, 41 pp 1
    if (e["ph"] == "X") e["args"]["pp_rank"] = e["tid"].get<int>() - 40;
  EXPECT_EQ(import_trace_texts({{"m.json", doc.dump()}}, m, 1).work.compute_ns, w.compute_ns);
  for (json& e : events)
    if (e["ph"] == "X") e["args"]["pp_rank"] = 41 - e["tid"].get<int>();
  EXPECT_ERROR(import_trace_texts({{"m.json", doc.dump()}}, m, 1), InputError,
               "args \"pp_rank\" 1, but its thread 'rank 0 (pp 0, tp 0)' says 0");
}

}  // namespace
}  // namespace rrfp::test

// The trace importers beyond the round trip (docs/twin.md): traces in the PyTorch profiler's
// formats (a real one from torch 1.13's exporter, and Kineto's layout built from a simulated
// step) and in Megatron-LM's timer layout replay their recorded order to the recorded step,
// take message latencies from receive spans, pick steps, and fail with a line naming the
// problem.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.hpp"
#include "core/task.hpp"
#include "expect_error.hpp"
#include "report/predict.hpp"
#include "report/report.hpp"
#include "sim/replay.hpp"
#include "sim/trace_import.hpp"
#include "sim_helpers.hpp"
#include "trace_fixtures.hpp"

#ifndef RRFP_TEST_DATA
#error "RRFP_TEST_DATA must name tests/data"
#endif

namespace rrfp::test {
namespace {

// Also with the device spans on the device's pid, as Kineto writes them: each rank's file was
// read as two ranks (its process and its device), "2 chunks on 4 stages".
TEST(TraceFormats, KinetoTraceReplaysItsRecordedOrderToTheStep) {
  for (std::uint64_t seed = 1; seed <= 3; ++seed)
    for (const char* hint : {"zb-h1", "bfw"}) {
      WorkModel m(config(3, 6, 1, true));
      RealizedWork w = realize(workload_preset("paper"), m, 1, seed);
      const StepRecord r = simulated(m, hint, hint[0] == 'z' ? Policy::Fixed : Policy::Ready, w);
      EXPECT_EQ(import_trace_texts(kineto_files(r, m, true, true), m, 1).work.compute_ns,
                w.compute_ns)
          << "the device's spans on its own pid";
      const ImportedRun in = import_trace_texts(kineto_files(r, m), m, 1);
      EXPECT_EQ(in.format, "torch");
      EXPECT_EQ(in.run, "ProfilerStep#5");
      EXPECT_EQ(in.work.compute_ns, w.compute_ns) << "device spans, not the CPU's";
      EXPECT_EQ(in.messages_measured, in.messages);
      // A double holds an epoch reading (1.7e15 us) to 0.25 us: the step's length is off by at
      // most two roundings, the replay's by those of the messages on its critical path.
      EXPECT_NEAR(static_cast<double>(in.measured_ns), static_cast<double>(r.makespan), 250);
      const Prediction p = predict(in, m.config(), 1);
      EXPECT_NEAR(static_cast<double>(p.replayed.metrics.makespan), static_cast<double>(r.makespan),
                  1000)
          << hint << " seed " << seed;
    }
}

TEST(TraceFormats, MegatronTimersReplayTheirRecordedOrderToTheStep) {
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    PipelineConfig c = config(2, 4, 2);  // interleaved: two model chunks per rank
    WorkModel m(c);
    RealizedWork w = realize(workload_preset("language"), m, 2, seed);
    const StepRecord r = simulated(m, "interleaved-1f1b", Policy::Fixed, w);
    // Iteration 3 lacks a backward; 4 is whole: the default takes 4, --step 3 names the gap.
    const std::vector<std::pair<std::string, std::string>> files{
        {"it3.json", megatron_file(r, m, 2, 3, true)},
        {"it4.json", megatron_file(r, m, 2, 4, false)}};
    const ImportedRun in = import_trace_texts(files, m, 2);
    EXPECT_EQ(in.format, "megatron");
    EXPECT_EQ(in.run, "iteration 4");
    EXPECT_EQ(in.work.compute_ns, w.compute_ns);
    EXPECT_EQ(in.messages_measured, in.messages);
    const Prediction p = predict(in, c, 2);
    EXPECT_NEAR(static_cast<double>(p.replayed.metrics.makespan), static_cast<double>(r.makespan),
                2)
        << "seed " << seed;
    TraceOptions o;
    o.step = 3;
    try {
      import_trace_texts(files, m, 2, o);
      ADD_FAILURE() << "an incomplete iteration was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("(iteration 3): the megatron timeline lacks tasks"),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("B c"), std::string::npos) << e.what();
    }
  }
}

// A trace recorded by torch 1.13's own exporter (tests/data/make_torch_trace.py: two processes,
// Gloo, 1F1B, record_function labels): per-process clocks that the receives align.
TEST(TraceFormats, RealTorchProfilerTraceReplaysWithinTwoPercent) {
  const std::string dir = std::string(RRFP_TEST_DATA) + "/torch-pp2";
  const PipelineConfig c = infer_trace_config(dir, 1);
  EXPECT_EQ(c.pp, 2);
  EXPECT_EQ(c.vpp, 1);
  EXPECT_EQ(c.microbatches, 4);
  EXPECT_FALSE(c.split_backward);
  WorkModel m(c);
  for (int step : {1, 2}) {
    TraceOptions o;
    o.step = step;
    const ImportedRun in = import_trace(dir, m, 1, o);
    EXPECT_EQ(in.messages_measured, 8);
    const Prediction p = predict(in, c, 1);
    EXPECT_LT(std::abs(p.reproduction_error()), 0.02) << "step " << step;
    EXPECT_EQ(in.order.stages[1].front(), (TaskId{Kind::F, 1, 0}));
    EXPECT_EQ(in.order.stages[1][1], (TaskId{Kind::B, 1, 0}));  // 1F1B as recorded
  }
  TraceOptions o;
  o.step = 9;
  try {
    import_trace(dir, m, 1, o);
    ADD_FAILURE() << "a missing step was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("has no step 9; it has 1, 2"), std::string::npos)
        << e.what();
  }
}

// A trace whose last rank is missing is not a shorter pipeline: a receive from the missing stage
// (Kineto's RECV_B on rank 1) or a message to it (rrfp's send_us of the last F) is refused, where
// it was skipped or counted ("40 of 32 messages timed", the step replayed 26% short).
TEST(TraceFormats, RefusesMessagesOfAStageTheShapeLacks) {
  WorkModel m(config(3, 6, 1, true));
  RealizedWork w = realize(workload_preset("paper"), m, 1, 1);
  const StepRecord r = simulated(m, "zb-h1", Policy::Fixed, w);
  auto files = kineto_files(r, m, false);
  files.erase(files.begin());  // rank2.json: the files come last rank first
  // The files' world size says so first (tests/test_trace_torch_ranks.cpp); without it, the
  // receives do.
  for (auto& [name, text] : files) {
    json doc = json::parse(text);
    doc["distributedInfo"].erase("world_size");
    text = doc.dump();
  }
  EXPECT_ERROR(import_trace_texts(files, WorkModel(config(2, 6, 1, true)), 1), InputError,
               "the trace in rank1.json and 1 more file (ProfilerStep#5): receive of B c1 m0: "
               "its input would "
               "come from B c2 m0, no task of P=2 V=1: the trace records a stage the shape lacks "
               "(a rank's file missing?)");
  ReportRun run;
  run.label = "r";
  run.cfg = m.config();
  run.result = r;
  run.result.pp = 2;  // stage 2's process and tasks left out
  std::erase_if(run.result.tasks, [](const TaskRecord& t) { return t.stage == 2; });
  const std::string path = ::testing::TempDir() + "rrfp_two_of_three.json";
  write_chrome_trace(path, {run});
  EXPECT_ERROR(import_trace(path, WorkModel(config(2, 6, 1, true)), 1), InputError,
               ": send_us says its output went to another stage, but no task of P=2 V=1 takes it");
  std::remove(path.c_str());
}

// A folder holding rrfp's trace of a step beside a profiler's files was read as rrfp's, the
// profiler's files left out unsaid: refused, naming a file of each tool.
TEST(TraceFormats, TracesOfTwoToolsTogetherAreRefusedNamingOneOfEach) {
  WorkModel m(config(2, 4, 1, true));
  RealizedWork w = realize(workload_preset("paper"), m, 1, 1);
  const StepRecord r = simulated(m, "zb-h1", Policy::Fixed, w);
  const std::string rrfp_text = rrfp_trace_text(m, r, "rrfp_beside_torch.json");
  auto files = kineto_files(r, m);
  const std::string torch_file = files.front().first;
  files.insert(files.begin(), {"a_rrfp.json", rrfp_text});
  EXPECT_ERROR(import_trace_texts(files, m, 1), InputError,
               "a_rrfp.json is a trace of rrfp and " + torch_file +
                   " one of torch: a replay reads one tool's traces (move the others out of the "
                   "folder, or name the tool with `trace_format`)");
  TraceOptions o;
  o.format = "torch";  // named: the profiler's files are read, rrfp's holding none of its labels
  EXPECT_EQ(import_trace_texts(files, m, 1, o).work.compute_ns, w.compute_ns);
  files.erase(files.begin());
  EXPECT_EQ(import_trace_texts(files, m, 1).format, "torch");
  // A rank's file whose tasks are not labelled: it was left out, the next rank's file taking its
  // stage (P=2 replayed as P=1, with an error of -66.7% and exit 0).
  files = kineto_files(r, m, false);
  std::string& last = files.back().second;
  for (size_t at = last.find("\"PP:"); at != std::string::npos; at = last.find("\"PP:", at))
    last.replace(at, 4, "\"mm:");
  EXPECT_ERROR(import_trace_texts(files, WorkModel(config(1, 4, 1, true)), 1), InputError,
               files.back().first + ": a profiler's trace of a rank without task spans");
}

// The shape of a Megatron trace is probed from its largest ids: one out of range named a shape of
// millions of tasks (model_chunk_id 1048575 in a 10 KB trace: 10 s, 3.4 GB, then a line listing
// 16.7 million missing tasks). An id the others do not lead up to, and a shape needing more
// events than the trace holds, are refused at once, the first naming its event.
TEST(TraceFormats, MegatronShapeIsBoundedByWhatTheTraceHolds) {
  WorkModel m(config(2, 4));
  RealizedWork w = realize(workload_preset("language"), m, 1, 1);
  const StepRecord r = simulated(m, "1f1b", Policy::Fixed, w);
  json doc = json::parse(megatron_file(r, m, 1, 0, false));
  const std::string path = ::testing::TempDir() + "rrfp_megatron_probe.json";
  auto write = [&](const json& d) { std::ofstream(path) << d.dump(); };
  write(doc);
  EXPECT_EQ(infer_trace_config(path, 1).vpp, 1);
  json& event = doc["traceEvents"][5];
  event["args"]["model_chunk_id"] = 1048575;
  write(doc);
  EXPECT_ERROR(infer_trace_config(path, 1), InputError,
               "rrfp_megatron_probe.json: event 6 (" + event["name"].get<std::string>() +
                   "): model_chunk_id 1048575: a complete step needs all 1048576 of them, "
                   "but the trace's events carry 2 (an id out of range?)");
  // Every id leads up to the largest, yet 3 events cannot hold P=3 V=3 M=3's 54.
  json few = json::array();
  for (int i = 0; i < 3; ++i)
    few.push_back({{"ph", "X"},
                   {"name", "forward-compute"},
                   {"tid", i},
                   {"ts", i},
                   {"dur", 1},
                   {"args", {{"iteration", 0}, {"microbatch_id", i}, {"model_chunk_id", i}}}});
  write(few);
  EXPECT_ERROR(infer_trace_config(path, 1), InputError,
               "its ids make a shape of P=3 V=3 M=3, whose iteration has 54 compute events, but "
               "the trace holds 3");
  std::remove(path.c_str());
}

TEST(TraceFormats, RefusesWhatItCannotMap) {
  WorkModel m(config(2, 2));
  auto refused = [&](const std::vector<std::pair<std::string, std::string>>& files,
                     const std::string& want, TraceOptions o = {}) {
    try {
      import_trace_texts(files, m, 1, o);
      ADD_FAILURE() << "accepted: " << files.front().second.substr(0, 200);
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  const std::string one_rank =
      R"([{"ph": "X", "name": "PP:0F0", "pid": 1, "tid": 1, "ts": 0, "dur": 5}])";
  refused({{"r0.json", one_rank}}, "1 rank(s) with task spans, but the shape has 2 stage(s)");
  refused({{"r0.json", R"([{"ph": "X", "name": "PP:1F0", "pid": 1, "ts": 0, "dur": 5}])"},
           {"r1.json", R"([{"ph": "X", "name": "PP:0F0", "pid": 1, "ts": 0, "dur": 5}])"}},
          "chunk 1 is not on that stage");
  refused({{"m.json", R"([{"ph": "X", "name": "forward-compute", "tid": 0, "ts": 0, "dur": 1}])"}},
          "no args");
  refused({{"m.json",
            R"([{"ph": "X", "name": "forward-compute", "tid": 0, "ts": 0, "dur": 1,
                 "args": {"iteration": 1}}])"}},
          "args lack \"microbatch_id\" or \"microbatch\"");
  refused({{"m.json",
            R"([{"ph": "X", "name": "forward-compute", "tid": 5, "ts": 0, "dur": 1,
                 "args": {"iteration": 1, "microbatch_id": 0}}])"}},
          "rank pp 5 tp 0 is outside the shape (pp 2, tp 1): give the `pp` and `tp` it was "
          "recorded with");
  refused({{"m.json",
            R"([{"ph": "X", "name": "forward-compute", "tid": 0, "ts": 0, "dur": 1,
                 "args": {"iteration": 1, "microbatch_id": 0, "pp_rank": 0, "tp_rank": 1}}])"}},
          "rank pp 0 tp 1 is outside the shape (pp 2, tp 1): give the `tp` it was recorded with");
  // Without model_chunk_id at V=2 every task was chunk 0's: "F c0 m0 appears twice".
  const WorkModel v2(config(2, 2, 2));
  try {
    import_trace_texts({{"m.json", R"([{"ph": "X", "name": "forward-compute", "tid": 0, "ts": 0,
                                       "dur": 1, "args": {"iteration": 1, "microbatch_id": 0}}])"}},
                       v2, 1);
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("m.json: event 1 (forward-compute): no model_chunk_id, "
                                         "which tells the chunks of a stage apart at `vpp` 2"),
              std::string::npos)
        << e.what();
  }
  const std::string gz = gzip(one_rank);
  refused({{"t.json.gz", gz.substr(0, gz.size() / 2)}}, "not a complete gzip stream");
  TraceOptions forced;
  forced.format = "megatron";
  refused({{"r0.json", one_rank}}, "no megatron task events", forced);
  forced.format = "nvtx";
  refused({{"r0.json", one_rank}}, "expected auto, rrfp, torch or megatron", forced);
}

// A field of the wrong JSON type ("cat": 5) ended in nlohmann's type_error, printed as an
// "internal error": it is refused naming the file, the event and the field.
TEST(TraceFormats, RefusesAFieldOfTheWrongTypeNamingIt) {
  WorkModel m(config(1, 1));
  std::string cat = torch_one_rank();
  cat.insert(cat.find("\"dur\""), "\"cat\": 5, ");
  EXPECT_ERROR(import_trace_texts({{"t.json", cat}}, m, 1), InputError,
               "t.json: event 1: field \"cat\" must be a string (or absent), got 5");
  EXPECT_ERROR(
      import_trace_texts({{"t.json", torch_one_rank(R"(, {"ph": 1, "name": "x"})")}}, m, 1),
      InputError, "t.json: event 3: field \"ph\" must be a string (or absent), got 1");
  const std::string megatron =
      R"([{"ph": "M", "name": "thread_name", "tid": 0, "args": {"name": 7}},
          {"ph": "X", "name": "forward-compute", "tid": 0, "ts": 0, "dur": 1,
           "args": {"iteration": 0, "microbatch_id": 0}}])";
  EXPECT_ERROR(import_trace_texts({{"m.json", megatron}}, m, 1), InputError,
               "m.json: event 1: field \"args.name\" must be a string (or absent), got 7");
}

// `cat a.gz b.gz` and bgzip write several gzip members: each is read (the first alone was, and
// the rest of the trace dropped silently).
TEST(TraceFormats, ReadsEveryMemberOfAGzipFile) {
  WorkModel m(config(3, 6, 1, true));
  RealizedWork w = realize(workload_preset("paper"), m, 1, 1);
  const StepRecord r = simulated(m, "zb-h1", Policy::Fixed, w);
  auto files = kineto_files(r, m, false);
  const ImportedRun plain = import_trace_texts(files, m, 1);
  for (auto& [name, text] : files) {
    const size_t half = text.size() / 2;
    text = gzip(text.substr(0, half)) + gzip(text.substr(half));
    name += ".gz";
  }
  const ImportedRun members = import_trace_texts(files, m, 1);
  EXPECT_EQ(members.work.compute_ns, plain.work.compute_ns);
  EXPECT_EQ(members.measured_ns, plain.measured_ns);
}

// A folder's gzip files were all decompressed before their memory was counted (20 files of
// 240 KB, each 250 MB unzipped, took 5.4 GB): the running total is refused at the file where it
// passes what there is.
TEST(TraceFormats, BoundsTheMemoryAFoldersGzipFilesTakeTogether) {
  const std::string big = gzip("[" + std::string(8u << 20, ' ') + "]");  // 8 MiB unzipped
  std::vector<std::pair<std::string, std::string>> files;
  for (int i = 0; i < 4; ++i)  // std::string("a") +: "a" + drew a false overflow from g++ 12
    files.emplace_back(std::string("a") + std::to_string(i) + ".json.gz", big);
  setenv("RRFP_MEMORY_LIMIT", "20M", 1);
  EXPECT_ERROR(import_trace_texts(files, WorkModel(config(1, 1)), 1), InputError,
               "a2.json.gz: decompressing and parsing 3 of 4 trace files: about");
  unsetenv("RRFP_MEMORY_LIMIT");
}

// Two files of one rank were replayed as a pipeline of two stages, and a step's second span
// replaced its first: both are refused, naming the files or the step.
TEST(TraceFormats, RefusesARankOrAStepGivenTwice) {
  const std::string rank0 = torch_one_rank("", R"("distributedInfo": {"rank": 0}, )");
  EXPECT_ERROR(
      import_trace_texts({{"a.json", rank0}, {"b.json", rank0}}, WorkModel(config(2, 1)), 1),
      InputError, "a.json and b.json both give distributedInfo.rank 0");
  const std::string step =
      R"(, {"ph": "X", "name": "ProfilerStep#1", "ts": 0, "dur": 40, "pid": 1, "tid": 1})";
  EXPECT_ERROR(
      import_trace_texts({{"t.json", torch_one_rank(step + step)}}, WorkModel(config(1, 1)), 1),
      InputError, "t.json: event 4: ProfilerStep#1 appears twice in one rank's trace");
  // A device's copies of the step, one a stream its kernels ran on (Kineto writes them so),
  // are no second step: a trace of a step on a compute and a copy stream was refused.
  const std::string device =
      R"(, {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#1", "ts": 0, )"
      R"("dur": 40, "pid": 1, "tid": 7}, {"ph": "X", "cat": "gpu_user_annotation", )"
      R"("name": "ProfilerStep#1", "ts": 0, "dur": 40, "pid": 1, "tid": 13})";
  EXPECT_NO_THROW(
      import_trace_texts({{"t.json", torch_one_rank(step + device)}}, WorkModel(config(1, 1)), 1));
}

// "appears twice" said "(a trace of several steps needs --step)" whether --step was given or the
// trace had steps at all; and --step on a trace without step spans answered "it has -1".
TEST(TraceFormats, ATaskSeenTwiceSaysWhatTheTraceLacks) {
  WorkModel m(config(1, 1));
  const std::string again =
      R"(, {"ph": "X", "name": "Forward 0", "ts": 40, "dur": 10, "pid": 1, "tid": 1})";
  EXPECT_ERROR(import_trace_texts({{"t.json", torch_one_rank(again)}}, m, 1), InputError,
               "t.json (the whole trace): task F c0 m0 appears twice (a trace of several steps "
               "needs step spans, ProfilerStep#N, to replay one)");
  TraceOptions o;
  o.step = 0;
  EXPECT_ERROR(import_trace_texts({{"t.json", torch_one_rank()}}, m, 1, o), InputError,
               "`step`: t.json has no step spans (ProfilerStep#N): leave out `step` to replay the "
               "whole trace");
  const std::string step =
      R"(, {"ph": "X", "name": "ProfilerStep#0", "ts": 0, "dur": 60, "pid": 1, "tid": 1})";
  EXPECT_ERROR(import_trace_texts({{"t.json", torch_one_rank(again + step)}}, m, 1, o), InputError,
               "t.json (ProfilerStep#0): task F c0 m0 appears twice in one step");
  // Megatron: the same rank's file twice.
  WorkModel two(config(2, 4));
  RealizedWork w = realize(workload_preset("language"), two, 1, 1);
  const std::string it = megatron_file(simulated(two, "1f1b", Policy::Fixed, w), two, 1, 0, false);
  EXPECT_ERROR(import_trace_texts({{"r0.json", it}, {"r1.json", it}}, two, 1), InputError,
               "appears twice in one step (two files for one rank?)");
}

// One stray microbatch id (99999999) made a shape of 100 million microbatches, and the error
// blamed --pp, --vpp and --microbatches, flags never given: it names the event.
TEST(TraceFormats, TorchShapeIsBoundedByTheIdsItHolds) {
  const std::string path = ::testing::TempDir() + "rrfp_torch_probe.json";
  std::ofstream(path) << torch_one_rank(
      R"(, {"ph": "X", "name": "Forward 99999999", "ts": 40, "dur": 10, "pid": 1, "tid": 1})");
  EXPECT_ERROR(infer_trace_config(path, 1), InputError,
               "rrfp_torch_probe.json: event 3: microbatch 99999999: a complete step needs all "
               "100000000 of them, but the trace's events carry 2 (an id out of range?)");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace rrfp::test

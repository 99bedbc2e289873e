// The trace importers beyond the round trip (docs/twin.md): traces in the PyTorch profiler's
// formats (a real one from torch 1.13's exporter, and Kineto's layout built from a simulated
// step) and in Megatron-LM's timer layout replay their recorded order to the recorded step,
// take message latencies from receive spans, pick steps, and fail with a line naming the
// problem.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.hpp"
#include "core/task.hpp"
#include "expect_error.hpp"
#include "mutate.hpp"
#include "report/predict.hpp"
#include "report/report.hpp"
#include "sim/replay.hpp"
#include "sim/trace_import.hpp"
#include "sim_helpers.hpp"

#ifndef RRFP_TEST_DATA
#error "RRFP_TEST_DATA must name tests/data"
#endif

namespace rrfp::test {
namespace {

using nlohmann::json;

std::string gzip(const std::string& text) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, text.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

StepRecord simulated(const WorkModel& m, const std::string& hint, Policy p, RealizedWork& w) {
  w.coord_ns = 0;  // a trace carries no coordination cost: the replay has none either
  SimOptions opt;
  opt.arbiter.policy = p;
  opt.record = true;
  return simulate(m, make_hint(hint, m), w, opt);
}

double us(std::int64_t ns) {
  return static_cast<double>(ns) / 1e3;
}

// The end of each task on its rank, and the message its output took.
const TaskRecord& record_of(const StepRecord& r, const TaskId& t, int rank) {
  for (const TaskRecord& x : r.tasks)
    if (x.task == t && x.rank == rank) return x;
  ADD_FAILURE() << "no record of " << to_string(t);
  return r.tasks.front();
}

// A receive span per cross-stage input: from the producer's end to its arrival.
template <class Emit>
void for_each_receive(const StepRecord& r, const WorkModel& m, Emit emit) {
  for (const TaskRecord& t : r.tasks) {
    const std::optional<TaskId> p = data_producer(t.task);
    if (!p || !m.valid(*p) || m.stage_of(*p) == t.stage) continue;
    const TaskRecord& prod = record_of(r, *p, t.rank);
    emit(t, prod.compute_end, prod.compute_end + prod.send_ns);
  }
}

// Kineto's layout (one object per rank: distributedInfo, traceEvents with user_annotation
// spans, ProfilerStep#N, absolute microsecond clocks); CPU spans twice as long as the device's
// gpu_user_annotation spans, which the importer must prefer.
std::vector<std::pair<std::string, std::string>> kineto_files(const StepRecord& r,
                                                              const WorkModel& m, bool zip = true) {
  const double base = 1712667379482786;  // epoch microseconds, as a 2024 trace has them
  std::vector<json> docs(m.pp());
  for (int s = 0; s < m.pp(); ++s) {
    docs[s] = {{"schemaVersion", 1},
               {"distributedInfo", {{"backend", "nccl"}, {"rank", s}, {"world_size", m.pp()}}},
               {"traceEvents", json::array()}};
    docs[s]["traceEvents"].push_back({{"ph", "X"},
                                      {"cat", "user_annotation"},
                                      {"name", "ProfilerStep#5"},
                                      {"pid", 100 + s},
                                      {"tid", 100 + s},
                                      {"ts", base - 50},
                                      {"dur", us(r.makespan) + 100}});
  }
  for (const TaskRecord& t : r.tasks) {
    const char k = t.task.kind == Kind::F ? 'F' : t.task.kind == Kind::W ? 'W' : 'I';
    const std::string name = "PP:" + std::to_string(t.task.chunk) + k + std::to_string(t.task.mb);
    const double dur = us(t.compute_end - t.start);
    for (const char* cat : {"user_annotation", "gpu_user_annotation"})
      docs[t.stage]["traceEvents"].push_back(
          {{"ph", "X"},
           {"cat", cat},
           {"name", name},
           {"pid", 100 + t.stage},
           {"tid", std::string(cat) == "user_annotation" ? 100 + t.stage : 7},
           {"ts", base + us(t.start)},
           {"dur", std::string(cat) == "user_annotation" ? 2 * dur : dur}});
  }
  for_each_receive(r, m, [&](const TaskRecord& t, std::int64_t from, std::int64_t to) {
    const std::string name = "PP:" + std::to_string(t.task.chunk) + "RECV_" +
                             (t.task.kind == Kind::F ? "F" : "B") + std::to_string(t.task.mb);
    docs[t.stage]["traceEvents"].push_back({{"ph", "X"},
                                            {"cat", "gpu_user_annotation"},
                                            {"name", name},
                                            {"pid", 100 + t.stage},
                                            {"tid", 7},
                                            {"ts", base + us(from)},
                                            {"dur", us(to - from)}});
  });
  std::vector<std::pair<std::string, std::string>> files;
  for (int s = m.pp() - 1; s >= 0; --s)  // file order must not matter: distributedInfo says
    files.emplace_back("rank" + std::to_string(s) + (zip ? ".json.gz" : ".json"),
                       zip ? gzip(docs[s].dump()) : docs[s].dump());
  return files;
}

TEST(TraceFormats, KinetoTraceReplaysItsRecordedOrderToTheStep) {
  for (std::uint64_t seed = 1; seed <= 3; ++seed)
    for (const char* hint : {"zb-h1", "bfw"}) {
      WorkModel m(config(3, 6, 1, true));
      RealizedWork w = realize(workload_preset("paper"), m, 1, seed);
      const StepRecord r = simulated(m, hint, hint[0] == 'z' ? Policy::Fixed : Policy::Ready, w);
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

// Megatron's timers: one thread per (pp, tp) rank named so, args iteration / microbatch_id /
// model_chunk_id (interleaved, two chunks per rank), forward-recv / backward-recv spans.
std::string megatron_file(const StepRecord& r, const WorkModel& m, int tp, int iteration,
                          bool drop_last) {
  json events = json::array();
  for (int s = 0; s < m.pp(); ++s)
    for (int t = 0; t < tp; ++t)
      events.push_back({{"ph", "M"},
                        {"name", "thread_name"},
                        {"pid", 0},
                        {"tid", 40 + s * tp + t},
                        {"args",
                         {{"name", "rank " + std::to_string(s * tp + t) + " (pp " +
                                       std::to_string(s) + ", tp " + std::to_string(t) + ")"}}}});
  auto span = [&](const char* name, const TaskRecord& t, double ts, double dur) {
    events.push_back({{"ph", "X"},
                      {"name", name},
                      {"pid", 0},
                      {"tid", 40 + t.stage * tp + t.rank},
                      {"ts", ts},
                      {"dur", dur},
                      {"args",
                       {{"iteration", iteration},
                        {"microbatch_id", t.task.mb},
                        {"model_chunk_id", m.local_chunk(t.task.chunk)}}}});
  };
  for (const TaskRecord& t : r.tasks) {
    if (drop_last && t.task.mb == m.microbatches() - 1 && t.task.kind == Kind::B) continue;
    span(t.task.kind == Kind::F ? "forward-compute" : "backward-compute", t, us(t.start),
         us(t.compute_end - t.start));
  }
  for_each_receive(r, m, [&](const TaskRecord& t, std::int64_t from, std::int64_t to) {
    span(t.task.kind == Kind::F ? "forward-recv" : "backward-recv", t, us(from) - 3,
         us(to - from) + 3);  // posted before the producer finished: that part is not latency
  });
  return json{{"traceEvents", events}}.dump();
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
  try {
    parse_replay_csv(text, m, 1, "d.csv", 7);
    ADD_FAILURE() << "a missing step was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("has no step 7; its last is 4"), std::string::npos)
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
  auto files = kineto_files(r, m);
  files.erase(files.begin());  // rank2.json: the files come last rank first
  EXPECT_ERROR(import_trace_texts(files, WorkModel(config(2, 6, 1, true)), 1), InputError,
               "rank1.json.gz and 1 more (ProfilerStep#5): receive of B c1 m0: its input would "
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
                   "): model_chunk_id 1048575: a complete iteration needs all 1048576 of them, "
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
          "rank pp 5 tp 0 is outside the shape");
  const std::string gz = gzip(one_rank);
  refused({{"t.json.gz", gz.substr(0, gz.size() / 2)}}, "not a complete gzip stream");
  TraceOptions forced;
  forced.format = "megatron";
  refused({{"r0.json", one_rank}}, "no megatron task events", forced);
  forced.format = "nvtx";
  refused({{"r0.json", one_rank}}, "expected auto, rrfp, torch or megatron", forced);
}

// The trace importers and the stepped CSV under the suite's mutation fuzzer (mutate.hpp): rrfp's
// own trace, Kineto's layout (one file of two mutated, or its gzip bytes), Megatron's timers and
// a CSV of two steps, each edited at random, must be accepted or refused with an InputError,
// never crash or throw anything else. RRFP_FUZZ_ITERS=N runs N inputs.
TEST(Fuzz, TraceImportersSurviveMutatedTraces) {
  WorkModel m(config(2, 4, 1, true));
  RealizedWork w = realize(workload_preset("paper"), m, 1, 3);
  const StepRecord r = simulated(m, "bfw", Policy::Ready, w);
  ReportRun run;
  run.label = "fuzz";
  run.cfg = m.config();
  run.result = r;
  const std::string path = ::testing::TempDir() + "rrfp-fuzz-trace.json";
  write_chrome_trace(path, {run});
  std::ifstream in(path);
  const std::string own((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(path.c_str());
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

}  // namespace
}  // namespace rrfp::test

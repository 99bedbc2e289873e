#pragma once
// Traces built from simulated steps, for the trace importers' tests: Kineto's layout (epoch
// clocks, device spans beside the CPU's, receives) and Megatron-LM's timers, from a step's
// records.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/task.hpp"
#include "report/report.hpp"
#include "sim_helpers.hpp"

namespace rrfp::test {

using json = nlohmann::json;

inline std::string gzip(const std::string& text) {
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

inline StepRecord simulated(const WorkModel& m, const std::string& hint, Policy p,
                            RealizedWork& w) {
  w.coord_ns = 0;  // a trace carries no coordination cost: the replay has none either
  SimOptions opt;
  opt.arbiter.policy = p;
  opt.record = true;
  return simulate(m, make_hint(hint, m), w, opt);
}

// rrfp's own trace (--trace) of step record `r` as text, written through a file `name` in the
// test's temporary folder, which is removed.
inline std::string rrfp_trace_text(const WorkModel& m, const StepRecord& r,
                                   const std::string& name) {
  ReportRun run;
  run.label = "r";
  run.cfg = m.config();
  run.result = r;
  const std::string path = ::testing::TempDir() + name;
  write_chrome_trace(path, {run});
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(path.c_str());
  return text;
}

inline double us(std::int64_t ns) {
  return static_cast<double>(ns) / 1e3;
}

// The end of each task on its rank, and the message its output took.
inline const TaskRecord& record_of(const StepRecord& r, const TaskId& t, int rank) {
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
// gpu_user_annotation spans, which the importer must prefer. `device_pid`: those spans on the
// device's pid (0), as Kineto writes them, not on the rank's process's.
inline std::vector<std::pair<std::string, std::string>> kineto_files(const StepRecord& r,
                                                                     const WorkModel& m,
                                                                     bool zip = true,
                                                                     bool device_pid = false) {
  const auto pid_of = [&](const std::string& cat, int stage) {
    return device_pid && cat == "gpu_user_annotation" ? 0 : 100 + stage;
  };
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
    // A split backward's B is its input half ("I"); a whole one is torch's "B".
    const char k = t.task.kind == Kind::F   ? 'F'
                   : t.task.kind == Kind::W ? 'W'
                   : m.split()              ? 'I'
                                            : 'B';
    const std::string name = "PP:" + std::to_string(t.task.chunk) + k + std::to_string(t.task.mb);
    const double dur = us(t.compute_end - t.start);
    for (const char* cat : {"user_annotation", "gpu_user_annotation"})
      docs[t.stage]["traceEvents"].push_back(
          {{"ph", "X"},
           {"cat", cat},
           {"name", name},
           {"pid", pid_of(cat, t.stage)},
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
                                            {"pid", pid_of("gpu_user_annotation", t.stage)},
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

// Megatron's timers: one thread per (pp, tp) rank named so, args iteration / microbatch_id /
// model_chunk_id (interleaved, two chunks per rank), forward-recv / backward-recv spans.
inline std::string megatron_file(const StepRecord& r, const WorkModel& m, int tp, int iteration,
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

// A minimal profiler trace of one rank (P=1 M=1): a forward and a backward, and `more` events.
inline std::string torch_one_rank(const std::string& more = "", const std::string& head = "") {
  return "{" + head +
         R"("traceEvents": [{"ph": "X", "name": "Forward 0", "ts": 0, "dur": 10, "pid": 1, "tid": 1},
         {"ph": "X", "name": "Backward 0", "ts": 20, "dur": 10, "pid": 1, "tid": 1})" +
         more + "]}";
}

}  // namespace rrfp::test

// rrfp's own trace read back (sim/trace_rrfp.cpp): what its processes and their args say is held
// to what its tasks show, and its shape is read as its tasks are.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "core/error.hpp"
#include "expect_error.hpp"
#include "report/predict.hpp"
#include "report/report.hpp"
#include "sim/trace_import.hpp"
#include "sim_helpers.hpp"

namespace rrfp::test {
namespace {

using json = nlohmann::json;

// A simulated step's trace, as rrfp writes it, parsed.
json written_trace(const WorkModel& m) {
  ReportRun run;
  run.label = "fixed 1f1b (async)";
  run.cfg = m.config();
  SimOptions opt;
  opt.arbiter.policy = Policy::Fixed;
  run.result =
      simulate(m, make_hint("1f1b", m), realize(workload_preset("language"), m, 1, 3), opt);
  const std::string path = ::testing::TempDir() + "rrfp_fields_written.json";
  write_chrome_trace(path, {run});
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::remove(path.c_str());
  return json::parse(text.str());
}

std::string saved(const json& doc, const char* name) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << doc.dump();
  return path;
}

// A pid named again by another process_name event took the last name: a stage moved to another
// run without a word, and another run was replayed. Named again alike, it is the same process.
TEST(RrfpTraceFields, APidNamedTwiceOtherwiseIsRefused) {
  const WorkModel m(config(2, 4));
  json doc = written_trace(m);
  doc["traceEvents"].push_back(
      {{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"args", {{"name", "other / stage 1"}}}});
  const std::string path = saved(doc, "rrfp_fields_pid.json");
  EXPECT_ERROR(import_trace(path, m, 1), InputError,
               " name pid 1 otherwise (stage 1 of run 'fixed 1f1b (async)', then stage 1 of run "
               "'other'): a process is one stage");
  doc["traceEvents"].back()["args"]["name"] = "fixed 1f1b (async) / stage 1";
  EXPECT_NO_THROW(import_trace(saved(doc, "rrfp_fields_pid.json"), m, 1));
  std::remove(path.c_str());
}

// A process named "RUN / stage 1x" (or "stage -1") was skipped, its tasks then said to be on a
// pid no process_name event names, "S below `pp` 1" with pp read from the other process; one
// whose pid is a string ("0") was said to be named by no process_name event, which named it.
TEST(RrfpTraceFields, AProcessNameOrPidItCannotReadIsRefusedNamingIt) {
  const WorkModel m(config(2, 4));
  for (const char* bad : {"1x", "-1", "99999999999"}) {
    json doc = written_trace(m);
    for (json& e : doc["traceEvents"])
      if (e.value("name", "") == "process_name" && e["pid"] == 1)
        e["args"]["name"] = std::string("fixed 1f1b (async) / stage ") + bad;
    const std::string path = saved(doc, "rrfp_fields_name.json");
    EXPECT_ERROR(import_trace(path, m, 1), InputError,
                 std::string("process name 'fixed 1f1b (async) / stage ") + bad +
                     "' names no stage: rrfp's traces name each stage's process \"LABEL / "
                     "stage S\", S a whole number below `pp`");
    std::remove(path.c_str());
  }
  json doc = written_trace(m);
  for (json& e : doc["traceEvents"])
    if (e.contains("pid")) e["pid"] = std::to_string(e["pid"].get<int>());
  const std::string path = saved(doc, "rrfp_fields_pid_text.json");
  EXPECT_ERROR(import_trace(path, m, 1), InputError,
               "process 'fixed 1f1b (async) / stage 0' has pid \"0\": rrfp's traces give each "
               "stage's process a whole-number pid");
  std::remove(path.c_str());
}

// The run's own step holds its tasks: one of 100 us was shown beside a measured step of 426 ms.
TEST(RrfpTraceFields, AStepShorterThanItsTasksIsRefused) {
  const WorkModel m(config(2, 4));
  json doc = written_trace(m);
  for (json& e : doc["traceEvents"])
    if (e["name"] == "process_name") e["args"]["step_us"] = 100.0;
  const std::string path = saved(doc, "rrfp_fields_step.json");
  EXPECT_ERROR(import_trace(path, m, 1), InputError,
               ": field \"step_us\" is 100 us, but the tasks of run 'fixed 1f1b (async)' span ");
  EXPECT_ERROR(import_trace(path, m, 1), InputError, " us: the run's step holds them all");
  std::remove(path.c_str());
}

// Ids written as 0.0 are read as the tasks' (whole_at), so the shape is probed from them too:
// predict without shape flags said the trace "holds no task to tell its shape by".
TEST(RrfpTraceFields, TheShapeIsProbedFromIdsWrittenAsFloats) {
  const WorkModel m(config(3, 5));
  json doc = written_trace(m);
  for (json& e : doc["traceEvents"])
    if (e.contains("args") && e["args"].contains("chunk")) {
      e["args"]["chunk"] = e["args"]["chunk"].get<double>();
      e["args"]["microbatch"] = e["args"]["microbatch"].get<double>();
    }
  const std::string path = saved(doc, "rrfp_fields_float.json");
  const PipelineConfig c = infer_trace_config(path, 1);
  EXPECT_EQ(c.pp, 3);
  EXPECT_EQ(c.vpp, 1);
  EXPECT_EQ(c.microbatches, 5);
  std::remove(path.c_str());
}

// Without --step the first complete step is replayed: one before it lacking a task was passed
// over with only the replayed step's name to show it. The import counts it, and predict says
// so beside the step.
TEST(RrfpTraceFields, AnEarlierStepPassedOverForLackingTasksIsSaid) {
  const WorkModel m(config(2, 4));
  json doc = written_trace(m);
  json two = json::array();
  for (const json& e : doc["traceEvents"])
    two.push_back(e);
  for (json e : doc["traceEvents"]) {  // run 1: the same, its processes named apart
    e["pid"] = e["pid"].get<int>() + 1000;
    if (e["name"] == "process_name")
      e["args"]["name"] = "again / stage " + e["args"]["name"].get<std::string>().substr(
                                                 e["args"]["name"].get<std::string>().size() - 1);
    two.push_back(e);
  }
  for (std::size_t i = 0; i < two.size(); ++i)  // run 0's first task dropped
    if (two[i].contains("args") && two[i]["args"].contains("kind")) {
      two.erase(i);
      break;
    }
  doc["traceEvents"] = two;
  const std::string path = saved(doc, "rrfp_fields_passed.json");
  const ImportedRun in = import_trace(path, m, 1);
  EXPECT_EQ(in.run, "run 'again'");
  EXPECT_EQ(in.passed_over, 1);
  EXPECT_NE(in.passed_over_why.find("(run 'fixed 1f1b (async)'): the rrfp timeline lacks tasks"),
            std::string::npos)
      << in.passed_over_why;
  const std::string text = format_prediction(predict(in, m.config(), 1), "t.json");
  EXPECT_NE(text.find("note: the first complete step of the trace; the one before it lacks "
                      "tasks (the first: "),
            std::string::npos)
      << text;
  std::remove(path.c_str());
}

}  // namespace
}  // namespace rrfp::test

// The mapping for rrfp's own --trace (docs/twin.md): a process "LABEL / stage S" is stage S of
// run LABEL; its thread id is the TP rank; a complete event whose args carry kind, chunk and
// microbatch is that task, `dur` its duration and args `send_us` the message its output sent;
// a "blocked: collective" span starting where a task ended is its rank's wait in the collective;
// the step starts at its first task or "blocked: ..." wait, whichever came first.
#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/format.hpp"
#include "core/json_input.hpp"
#include "core/modes.hpp"
#include "core/printable.hpp"
#include "sim/fold_w.hpp"
#include "sim/trace_formats.hpp"

namespace rrfp::trace {

bool split_process_name(const std::string& name, std::string& label, int& stage) {
  const std::string sep = " / stage ";
  const size_t at = name.rfind(sep);
  if (at == std::string::npos) return false;
  const std::string digits = name.substr(at + sep.size());
  if (digits.empty() || digits.size() > 6 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  label = name.substr(0, at);
  stage = std::stoi(digits);
  return true;
}

namespace {

// Each rank's waits in its TP group's collective ("blocked: collective" spans), by (pid, tid),
// as (start, duration) in start order.
using Waits = std::map<std::pair<long long, long long>, std::vector<std::pair<double, double>>>;

Waits collective_waits(const Doc& d) {
  Waits out;
  size_t n = 0;
  for (const auto& e : events_of(d)) {
    ++n;
    if (!e.is_object() || string_at(e, "ph", d.origin, n) != "X" ||
        string_at(e, "name", d.origin, n) != "blocked: collective")
      continue;
    const auto pid = e.find("pid"), ts = e.find("ts"), dur = e.find("dur");
    if (pid == e.end() || !pid->is_number_integer() || ts == e.end() || !ts->is_number() ||
        dur == e.end() || !dur->is_number())
      continue;  // not one of rrfp's own: the task reads without it
    const auto tid = e.find("tid");
    const long long rank = tid != e.end() && tid->is_number_integer() ? tid->get<long long>() : 0;
    out[{pid->get<long long>(), rank}].emplace_back(
        ts->get<double>(), wait_at(e, "dur", d.origin + ": event " + std::to_string(n)));
  }
  for (auto& [_, v] : out)
    std::sort(v.begin(), v.end());
  return out;
}

// The wait that starts where task `t` ended on its rank (the trace rounds times to the ns).
double wait_after(const Waits& waits, long long pid, const TimelineTask& t) {
  const auto it = waits.find({pid, t.tp_rank});
  if (it == waits.end()) return -1;
  const double end = t.start_us + t.dur_us, slack = 0.002;
  const auto w =
      std::lower_bound(it->second.begin(), it->second.end(), std::make_pair(end - slack, -1.0));
  return w != it->second.end() && w->first <= end + slack ? w->second : -1;
}

// Agree's rounds as recorded, per run: how many ranks of a stage waited from one instant to one
// instant, by (pid, start, end) in ns.
using RoundSpans = std::map<std::tuple<long long, long long, long long>, int>;

// A recorded wait ("blocked: ..." on a rank): where the step's first one started (agree's first
// round comes before any task), and agree's rounds.
// `pid`: the event's process (a stage of its run); `name`: the event's.
void read_wait(const nlohmann::json& e, long long pid, const std::string& name,
               const std::string& where, Timeline& t, RoundSpans& rounds) {
  const bool timed = e.contains("ts");
  const double ts = timed ? clock_at(e, "ts", where) : 0;
  if (timed) t.first_wait_us = std::min(t.first_wait_us, ts);
  if (name != "blocked: tp coordination") return;
  const auto dur = e.find("dur");
  if (dur == e.end() || !dur->is_number()) return;
  const double d = wait_at(e, "dur", where);
  t.coordination_us = t.coordination_us < 0 ? d : std::min(t.coordination_us, d);
  if (timed) ++rounds[{pid, std::llround(ts * 1e3), std::llround((ts + d) * 1e3)}];
}

// Agree's latency: a rank waits in its round from its proposal until every peer's has reached
// it, so ranks that proposed in one instant wait exactly the latency, and a rank whose peers
// proposed a little earlier waits less (the shortest wait read too short a latency: a
// simulated step replayed 4.6% short). The shortest wait that two ranks of a stage shared
// (one start, one end) where there is one; else the shortest.
void read_latency(const RoundSpans& rounds, Timeline& t) {
  double shared = -1;
  for (const auto& [span, ranks] : rounds) {
    const double d = static_cast<double>(std::get<2>(span) - std::get<1>(span)) / 1e3;
    if (ranks >= 2 && (shared < 0 || d < shared)) shared = d;
  }
  if (shared >= 0) t.coordination_us = shared;
}

// The processes' word on the settings of their whole run (args `ordered_forwards`, which older
// traces lack; `offer_payload` and `offer_ack_us`, written where payloads rode on their offers;
// `step_us`): every stage of a run says the same, and gives each or none (given by some and not
// the others, the givers' value was taken for the run's: a field lost on a stage, or a stage
// edited alone).
class RunSettings {
 public:
  // The settings a process of run `run` (`t`) gives in its `args`, read at `where`.
  void read(size_t run, Timeline& t, const nlohmann::json& args, const std::string& where) {
    ++stages_[run];
    take(run, t, args, where, "ordered_forwards", t.ordered_forwards);
    take(run, t, args, where, "offer_payload", t.offer_payload);
    take(run, t, args, where, "offer_ack_us", t.offer_ack_us);
    take(run, t, args, where, "step_us", t.step_us, kMaxSpanUs);
  }

  // Once every process is read: each setting given by every stage of its run or by none, and
  // the run's own step no shorter than its tasks.
  void check(const std::vector<Timeline>& runs) const {
    for (const auto& [at, given] : given_)
      if (given.first != stages_.at(at.first))
        throw InputError(given.second + ": field \"" + at.second + "\" is given by " +
                         std::to_string(given.first) + " of the " +
                         std::to_string(stages_.at(at.first)) + " stages of " + runs[at.first].run +
                         "; every stage of a run gives it, or none");
    // The step holds its tasks, from the first's start to the last's end: one shorter was shown
    // beside a measured step 4,000 times its length. 1 us over: the writer's rounding.
    for (const auto& [at, given] : given_) {
      const Timeline& t = runs[at.first];
      if (at.second != "step_us" || t.tasks.empty()) continue;
      double first = t.tasks.front().start_us, last = first;
      for (const TimelineTask& k : t.tasks) {
        first = std::min(first, k.start_us);
        last = std::max(last, k.start_us + k.dur_us);
      }
      if (last - first > *t.step_us + 1)
        throw InputError(given.second + ": field \"step_us\" is " + fmt("%.10g", *t.step_us) +
                         " us, but the tasks of " + t.run + " span " + fmt("%.10g", last - first) +
                         " us: the run's step holds them all");
    }
  }

 private:
  // A time is at most `most` us.
  template <class T>
  void take(size_t run, const Timeline& t, const nlohmann::json& args, const std::string& where,
            const char* key, std::optional<T>& setting, double most = kMaxTaskUs) {
    const auto it = args.find(key);
    if (it == args.end()) return;
    given_.try_emplace({run, key}, 0, where).first->second.first++;
    const std::string field = std::string(": field \"") + key + "\" is ";
    if constexpr (std::is_same_v<T, bool>) {
      if (!it->is_boolean()) throw InputError(where + field + "not true or false: " + brief(*it));
    } else if (!it->is_number() || !(it->get<double>() >= 0 && it->get<double>() <= most)) {
      throw InputError(where + field + "not a time from 0 to " + fmt("%g", most) +
                       " us: " + brief(*it));
    }
    const T value = it->get<T>();
    if (setting && *setting != value)
      throw InputError(where + field + brief(*it) + ", but another stage of " + t.run + " says " +
                       nlohmann::json(*setting).dump());
    setting = value;
  }

  std::map<size_t, int> stages_;                                                 // by run
  std::map<std::pair<size_t, std::string>, std::pair<int, std::string>> given_;  // count, first
};

// The steps the files' runs make. A file's processes of one run (its label) join, as a whole,
// the run's earliest step that has none of their stages, else start its next step: the files
// of one step's stages (a trace per process of a job) make one step whatever their names'
// order, and a file that gives a stage again another step (every process of a Python pipeline
// records the whole step; steps saved a file each). A folder of such files was refused, every
// task seen twice, and no --step could pick one.
class StepsOfRuns {
 public:
  explicit StepsOfRuns(std::vector<Timeline>& runs) : runs_(runs) {}

  // The step of run `label` that a file's processes of `stages` belong to.
  size_t place(const std::string& label, const std::set<int>& stages) {
    std::vector<size_t>& mine = steps_of_[label];
    for (const size_t step : mine)
      if (std::none_of(stages.begin(), stages.end(),
                       [&](int s) { return stages_[step].count(s) > 0; })) {
        stages_[step].insert(stages.begin(), stages.end());
        return step;
      }
    Timeline t;
    t.format = "rrfp";
    t.run = "run '" + printable(label, 60) + "'";
    t.fixed_blocking = label.starts_with("fixed ") && label.ends_with(" (blocking)");
    t.ready_blocking = label.starts_with("ready ") && label.ends_with(" (blocking)");
    t.step = static_cast<int>(runs_.size());
    mine.push_back(runs_.size());
    runs_.push_back(std::move(t));
    stages_.push_back(stages);
    return mine.back();
  }

 private:
  std::vector<Timeline>& runs_;
  std::map<std::string, std::vector<size_t>> steps_of_;  // label -> its steps, in order
  std::vector<std::set<int>> stages_;                    // by step: the stages it has
};

// A process of a file: its pid, run label, stage and args (`event`: its index, from 1).
struct Process {
  long long pid;
  std::string label;
  int stage;
  const nlohmann::json* args;
  size_t event;
};

// The processes a file names (process_name events of rrfp's "LABEL / stage N").
std::vector<Process> processes_of(const Doc& d, const WorkModel& m) {
  std::vector<Process> out;
  std::map<long long, size_t> named;  // pid -> its Process in `out`
  size_t event = 0;
  for (const auto& e : events_of(d)) {
    ++event;
    if (!e.is_object() || string_at(e, "ph", d.origin, event) != "M" ||
        string_at(e, "name", d.origin, event) != "process_name")
      continue;
    const auto args = e.find("args");
    const auto pid = e.find("pid");
    if (args == e.end() || !args->is_object()) continue;
    const std::string& name = string_at(*args, "name", d.origin, event, "args");
    Process p{0, "", 0, &*args, event};
    if (!split_process_name(name, p.label, p.stage)) {
      // "RUN / stage 1x" was skipped, and its tasks said to be of no stage "below `pp` 1".
      if (name.find(" / stage ") != std::string::npos)
        throw InputError(d.origin + ": event " + std::to_string(event) + ": process name '" +
                         printable(name, 60) +
                         "' names no stage: rrfp's traces name each stage's process \"LABEL / "
                         "stage S\", S a whole number below `pp`");
      continue;
    }
    // Its tasks were said to be on a pid "which no process_name event names".
    if (pid == e.end() || !pid->is_number_integer())
      throw InputError(d.origin + ": event " + std::to_string(event) + ": process '" +
                       printable(name, 60) + "' has pid " +
                       (pid == e.end() ? std::string("(none)") : brief(*pid)) +
                       ": rrfp's traces give each stage's process a whole-number pid");
    p.pid = pid->get<long long>();
    if (p.stage >= m.pp())
      throw InputError(d.origin + ": run '" + printable(p.label, 60) + "' records stage " +
                       std::to_string(p.stage) + ", which `pp` " + std::to_string(m.pp()) +
                       " (stages 0 to " + std::to_string(m.pp() - 1) +
                       ") lacks: give the shape the trace was recorded with");
    // Named again, the last name won: the stage moved to another run unsaid.
    if (const auto [at, fresh] = named.emplace(p.pid, out.size()); !fresh) {
      const Process& was = out[at->second];
      if (was.label == p.label && was.stage == p.stage) continue;
      throw InputError(d.origin + ": events " + std::to_string(was.event) + " and " +
                       std::to_string(event) + " name pid " + std::to_string(p.pid) +
                       " otherwise (stage " + std::to_string(was.stage) + " of run '" +
                       printable(was.label, 60) + "', then stage " + std::to_string(p.stage) +
                       " of run '" + printable(p.label, 60) + "'): a process is one stage");
    }
    out.push_back(std::move(p));
  }
  return out;
}

// A task event of `stage` (its args carry kind, chunk and microbatch) as a timeline's task,
// each field checked; `where` names the event.
TimelineTask task_of(const nlohmann::json& e, const nlohmann::json& args, const WorkModel& m,
                     int stage, const std::string& where) {
  const auto kind = args.find("kind");
  if (kind == args.end()) throw InputError(where + ": field \"kind\" is missing (F, B or W)");
  const std::string k = kind->is_string() ? kind->get<std::string>() : brief(*kind);
  if (k != "F" && k != "B" && k != "W")
    throw InputError(where + ": kind '" + printable(k, 10) + "' is not F, B or W");
  TimelineTask t;
  t.task = TaskId{k == "F"   ? Kind::F
                  : k == "B" ? Kind::B
                             : Kind::W,
                  whole_at(args, "chunk", where), whole_at(args, "microbatch", where)};
  // A W of a run without the split backward is folded into its B (sim/fold_w.hpp). Both
  // refusals come of a shape not the trace's (a V = 2 trace read at V = 1 named the task alone).
  const std::string other_shape =
      "; if the trace was recorded with another shape, give that one (`pp`, `vpp`, "
      "`microbatches`, `placement`)";
  if (!m.valid(t.task) && !folds_into_b(m, t.task))
    throw InputError(where + ": task " + to_string(t.task) + " does not exist in this run" +
                     other_shape);
  if (m.stage_of(t.task) != stage)
    throw InputError(where + ": task " + to_string(t.task) + " runs on stage " +
                     std::to_string(m.stage_of(t.task)) + ", not " + std::to_string(stage) +
                     other_shape);
  t.tp_rank = e.contains("tid") ? whole_at(e, "tid", where) : 0;
  t.dur_us = number_at(e, "dur", where);
  t.start_us = clock_at(e, "ts", where);  // without it the task was put at 0
  if (args.contains("send_us")) t.send_us = number_at(args, "send_us", where);
  return t;
}

// Each process of the file as its run and stage, by pid: the file's runs take their steps in
// the order the file names them, and each run's settings are read from its processes.
std::map<long long, std::pair<size_t, int>> place_processes(const Doc& d, const WorkModel& m,
                                                            StepsOfRuns& steps,
                                                            RunSettings& settings,
                                                            std::vector<Timeline>& runs) {
  const std::vector<Process> procs = processes_of(d, m);
  std::map<std::string, std::set<int>> stages;  // label -> the stages this file gives
  std::vector<std::string> labels;              // in the file's order: its runs' steps so
  for (const Process& p : procs) {
    const auto [at, added] = stages.try_emplace(p.label);
    if (added) labels.push_back(p.label);
    at->second.insert(p.stage);
  }
  std::map<std::string, size_t> step_of;
  for (const std::string& label : labels)  // (by name, "(async)" came before "(blocking)")
    step_of[label] = steps.place(label, stages.at(label));
  std::map<long long, std::pair<size_t, int>> where_of_pid;  // pid -> (run, stage)
  for (const Process& p : procs) {
    const size_t run = step_of.at(p.label);
    where_of_pid[p.pid] = {run, p.stage};
    const std::string where = d.origin + ": event " + std::to_string(p.event);
    settings.read(run, runs[run], *p.args, where);
  }
  return where_of_pid;
}

}  // namespace

std::vector<Timeline> read_rrfp(const std::vector<Doc>& docs, const WorkModel& m) {
  std::vector<Timeline> runs;
  StepsOfRuns steps(runs);
  std::map<size_t, RoundSpans> rounds;  // by run
  RunSettings settings;
  for (const Doc& d : docs) {
    const nlohmann::json& events = events_of(d);
    const auto where_of_pid = place_processes(d, m, steps, settings, runs);
    const Waits waits = collective_waits(d);
    size_t n = 0;
    for (const auto& e : events) {
      ++n;
      if (!e.is_object()) continue;
      const auto pid = e.find("pid");
      const auto args = e.find("args");
      // A task's args carry kind, chunk and microbatch; blocked spans carry none. An event with
      // only some of them is a task with a field lost, not another event (one without kind was
      // skipped, and the step was refused for lacking that task).
      const bool task =
          args != e.end() && args->is_object() &&
          (args->contains("kind") || args->contains("chunk") || args->contains("microbatch"));
      if (const std::string& ph = string_at(e, "ph", d.origin, n); ph != "X") {
        // A task as another phase was left out, and the next step replayed in its place.
        if (task && ph != "M")
          throw InputError(d.origin + ": event " + std::to_string(n) + ": a task with ph \"" +
                           printable(ph, 10) + "\"; a replay reads complete spans (\"X\")");
        continue;
      }
      const auto at = pid != e.end() && pid->is_number_integer()
                          ? where_of_pid.find(pid->get<long long>())
                          : where_of_pid.end();
      const std::string where = d.origin + ": event " + std::to_string(n);
      if (at == where_of_pid.end()) {
        // A task of no stage was left out, the step replayed without it where it was complete.
        if (task)
          throw InputError(where + ": a task on pid " +
                           (pid == e.end() ? std::string("(none)") : brief(*pid)) +
                           ", which no process_name event names a stage of (\"LABEL / stage S\", "
                           "S below `pp` " +
                           std::to_string(m.pp()) + ")");
        continue;
      }
      if (const std::string& name = string_at(e, "name", d.origin, n);
          name.starts_with("blocked")) {
        read_wait(e, at->first, name, where, runs[at->second.first], rounds[at->second.first]);
        continue;
      }
      if (!task) continue;  // other events
      TimelineTask t = task_of(e, *args, m, at->second.second, where);
      t.collective_us = wait_after(waits, pid->get<long long>(), t);
      runs[at->second.first].tasks.push_back(t);
    }
  }
  settings.check(runs);
  for (const auto& [run, spans] : rounds)
    read_latency(spans, runs[run]);
  return runs;
}

}  // namespace rrfp::trace

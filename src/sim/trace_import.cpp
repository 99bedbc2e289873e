#include "sim/trace_import.hpp"

#include <algorithm>
#include <map>

#include "core/error.hpp"
#include "core/json_input.hpp"

namespace rrfp {

namespace {

// "LABEL / stage S" -> (LABEL, S); false for any other process name.
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

double number_at(const nlohmann::json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number())
    throw InputError(where + ": `" + key + "` is missing or not a number");
  const double v = it->get<double>();
  if (!(v >= 0)) throw InputError(where + ": `" + key + "` is negative: " + brief(*it));
  return v;
}

int whole_at(const nlohmann::json& obj, const char* key, const std::string& where) {
  const double v = number_at(obj, key, where);
  if (v != static_cast<int>(v) || v > 1e9)
    throw InputError(where + ": `" + key +
                     "` is not a whole number in [0, 1e9]: " + brief(obj.at(key)));
  return static_cast<int>(v);
}

}  // namespace

RealizedWork parse_chrome_trace(const std::string& text, const WorkModel& m, int tp,
                                const std::string& origin) {
  const nlohmann::json doc = parse_json(text, origin);
  const nlohmann::json* events = &doc;
  if (doc.is_object()) {
    auto it = doc.find("traceEvents");
    if (it == doc.end()) throw InputError(origin + ": a JSON object without `traceEvents`");
    events = &*it;
  }
  if (!events->is_array()) throw InputError(origin + ": `traceEvents` is not an array");
  // Processes of rrfp runs: pid -> stage, for the run named first.
  std::map<long long, int> stage_of_pid;
  std::string run;
  for (const auto& e : *events) {
    if (!e.is_object() || e.value("ph", "") != "M" || e.value("name", "") != "process_name")
      continue;
    const auto args = e.find("args");
    const auto pid = e.find("pid");
    if (args == e.end() || !args->is_object() || pid == e.end() || !pid->is_number_integer())
      continue;
    std::string label;
    int stage = 0;
    if (!split_process_name(args->value("name", ""), label, stage)) continue;
    if (run.empty()) run = label;
    if (label != run) continue;
    if (stage >= m.pp())
      throw InputError(origin + ": run '" + run + "' has a stage " + std::to_string(stage) +
                       ", but `pp` is " + std::to_string(m.pp()));
    stage_of_pid[pid->get<long long>()] = stage;
  }
  if (run.empty())
    throw InputError(origin +
                     ": no rrfp run in this trace (no process named 'RUN / stage S'); "
                     "only traces written by rrfp's --trace can be replayed so far");
  RealizedWork r;
  r.tp = tp;
  r.num_tasks = m.num_tasks();
  const size_t slots = static_cast<size_t>(tp) * r.num_tasks;
  r.compute_ns.assign(slots, -1);
  r.message_ns.assign(slots, 0);
  r.message_bytes.assign(r.num_tasks, 0);
  size_t n = 0;
  for (const auto& e : *events) {
    ++n;
    if (!e.is_object() || e.value("ph", "") != "X") continue;
    const auto pid = e.find("pid");
    const auto args = e.find("args");
    if (pid == e.end() || !pid->is_number_integer() || args == e.end() || !args->is_object() ||
        !args->contains("kind"))
      continue;  // blocked spans and other events
    auto sp = stage_of_pid.find(pid->get<long long>());
    if (sp == stage_of_pid.end()) continue;  // another run in the same file
    const std::string where = origin + ": event " + std::to_string(n);
    const std::string k = args->value("kind", "");
    if (k != "F" && k != "B" && k != "W")
      throw InputError(where + ": kind '" + k.substr(0, 10) + "' is not F, B or W");
    const TaskId t{k == "F"   ? Kind::F
                   : k == "B" ? Kind::B
                              : Kind::W,
                   whole_at(*args, "chunk", where), whole_at(*args, "microbatch", where)};
    if (!m.valid(t))
      throw InputError(where + ": task " + to_string(t) + " does not exist in this run");
    if (m.stage_of(t) != sp->second)
      throw InputError(where + ": task " + to_string(t) + " runs on stage " +
                       std::to_string(m.stage_of(t)) + ", not " + std::to_string(sp->second));
    const int rank = e.contains("tid") ? whole_at(e, "tid", where) : 0;
    if (rank >= tp)
      throw InputError(where + ": thread (tp rank) " + std::to_string(rank) + " >= `tp` " +
                       std::to_string(tp));
    const size_t at = static_cast<size_t>(rank) * r.num_tasks + m.index(t);
    if (r.compute_ns[at] >= 0)
      throw InputError(where + ": task " + to_string(t) + " appears twice on tp rank " +
                       std::to_string(rank));
    const std::string at_dur = where + ": dur";
    r.compute_ns[at] = duration_ns(number_at(e, "dur", where), at_dur.c_str());
    if (args->contains("send_us")) {
      const std::string at_send = where + ": send_us";
      r.message_ns[at] = duration_ns(number_at(*args, "send_us", where), at_send.c_str());
    }
  }
  // Name what is missing, stage by stage (the first few tasks of each).
  std::string missing;
  for (int s = 0; s < m.pp(); ++s) {
    int count = 0;
    std::string names;
    for (const TaskId& t : m.stage_tasks(s))
      for (int rank = 0; rank < tp; ++rank)
        if (r.compute_ns[static_cast<size_t>(rank) * r.num_tasks + m.index(t)] < 0) {
          if (count++ < 3)
            names += (names.empty() ? "" : ", ") + to_string(t) +
                     (tp > 1 ? " (tp rank " + std::to_string(rank) + ")" : "");
        }
    if (count > 0)
      missing += (missing.empty() ? "" : "; ") + std::string("stage ") + std::to_string(s) + ": " +
                 std::to_string(count) + " (" + names + (count > 3 ? ", ..." : "") + ")";
  }
  if (!missing.empty())
    throw InputError(origin + ": run '" + run.substr(0, 60) +
                     "' lacks tasks this shape needs: " + missing);
  check_total(r);
  return r;
}

}  // namespace rrfp

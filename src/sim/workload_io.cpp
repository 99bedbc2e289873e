// Workload files: JSON overrides of WorkloadParams and replay CSVs of measured durations.
#include <cmath>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.hpp"
#include "core/format.hpp"
#include "core/input_file.hpp"
#include "core/json_input.hpp"
#include "core/modes.hpp"
#include "sim/replay.hpp"
#include "sim/trace_import.hpp"
#include "sim/workload.hpp"

namespace rrfp {

namespace {

using Setter = std::function<void(WorkloadParams&, const nlohmann::json&, const std::string&)>;

Setter number(double WorkloadParams::*field) {
  return [field](WorkloadParams& w, const nlohmann::json& v, const std::string& where) {
    if (!v.is_number()) throw InputError(where + ": must be a number, got " + brief(v));
    w.*field = v.get<double>();
  };
}
Setter integer(int WorkloadParams::*field) {
  return [field](WorkloadParams& w, const nlohmann::json& v, const std::string& where) {
    if (!v.is_number_integer()) throw InputError(where + ": must be an integer, got " + brief(v));
    const auto x = v.get<long long>();
    if (x < -1000000 || x > 1000000) throw InputError(where + ": out of range");
    w.*field = static_cast<int>(x);
  };
}
Setter boolean(bool WorkloadParams::*field) {
  return [field](WorkloadParams& w, const nlohmann::json& v, const std::string& where) {
    if (!v.is_boolean()) throw InputError(where + ": must be true or false, got " + brief(v));
    w.*field = v.get<bool>();
  };
}
Setter jitter(double JitterLevel::*field) {
  return [field](WorkloadParams& w, const nlohmann::json& v, const std::string& where) {
    if (!v.is_number()) throw InputError(where + ": must be a number, got " + brief(v));
    w.jitter.*field = v.get<double>();
  };
}

const std::map<std::string, Setter>& setters() {
  using W = WorkloadParams;
  static const std::map<std::string, Setter> s = {
      {"forward_us", number(&W::forward_us)},
      {"backward_ratio_min", number(&W::backward_ratio_min)},
      {"backward_ratio_max", number(&W::backward_ratio_max)},
      {"weight_share", number(&W::weight_share)},
      {"head_factor", number(&W::head_factor)},
      {"compute_sigma", number(&W::compute_sigma)},
      {"tokens_mean", number(&W::tokens_mean)},
      {"tokens_sigma", number(&W::tokens_sigma)},
      {"tokens_min", number(&W::tokens_min)},
      {"tokens_max", number(&W::tokens_max)},
      {"quadratic_share", number(&W::quadratic_share)},
      {"images_scale", number(&W::images_scale)},
      {"images_alpha", number(&W::images_alpha)},
      {"images_max", integer(&W::images_max)},
      {"image_us", number(&W::image_us)},
      {"image_tokens", number(&W::image_tokens)},
      {"vision_chunks", integer(&W::vision_chunks)},
      {"jitter_p", jitter(&JitterLevel::p)},
      {"jitter_floor_us", jitter(&JitterLevel::floor_us)},
      {"jitter_alpha", jitter(&JitterLevel::alpha)},
      {"straggler_stage", integer(&W::straggler_stage)},
      {"straggler_factor", number(&W::straggler_factor)},
      {"straggler_window", integer(&W::straggler_window)},
      {"straggler_prob", number(&W::straggler_prob)},
      {"comm_latency_us", number(&W::comm_latency_us)},
      {"comm_bandwidth_gbps", number(&W::comm_bandwidth_gbps)},
      {"comm_sigma", number(&W::comm_sigma)},
      {"comm_slow_prob", number(&W::comm_slow_prob)},
      {"comm_slow_us", number(&W::comm_slow_us)},
      {"comm_links", number(&W::comm_links)},
      {"comm_serial_receive", boolean(&W::comm_serial_receive)},
      {"comm_offer_payload", boolean(&W::comm_offer_payload)},
      {"comm_two_slowdown", number(&W::comm_two_slowdown)},
      {"comm_wake_us", number(&W::comm_wake_us)},
      {"comm_wake_per_copy_us", number(&W::comm_wake_per_copy_us)},
      {"bytes_per_token", number(&W::bytes_per_token)},
      {"tp_sigma", number(&W::tp_sigma)},
      {"tp_collective_us", number(&W::tp_collective_us)},
      {"coord_latency_us", number(&W::coord_latency_us)},
  };
  return s;
}

}  // namespace

WorkloadParams apply_workload_json(WorkloadParams w, const std::string& text,
                                   const std::string& origin) {
  const nlohmann::json j = parse_json(text, origin);
  if (!j.is_object()) throw InputError(origin + ": expected a JSON object of workload fields");
  if (j.contains("preset")) {
    if (!j["preset"].is_string()) throw InputError(origin + ": \"preset\" must be a string");
    w = workload_preset(j["preset"].get<std::string>());
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    // "calibration": the measurements behind a fragment `rrfp calibrate` wrote; not a field.
    if (it.key() == "preset" || it.key() == "calibration") continue;
    const std::string where = origin + ": field \"" + it.key() + "\"";
    auto s = setters().find(it.key());
    if (s == setters().end()) throw InputError(where + " is not a workload parameter");
    s->second(w, it.value(), where);
  }
  try {
    validate(w);
  } catch (const InputError& e) {
    throw InputError(origin + ": " + e.what());
  }
  return w;
}

WorkloadParams read_workload_file(const std::string& path, const std::string& preset) {
  return apply_workload_json(workload_preset(preset), read_input_file(path, kWorkloadFile), path);
}

RealizedWork parse_replay_csv(const std::string& text, const WorkModel& m, int tp,
                              const std::string& origin, int step) {
  RealizedWork r;
  r.tp = checked_tp(tp);
  r.num_tasks = m.num_tasks();
  r.compute_ns.assign(static_cast<size_t>(tp) * r.num_tasks, -1);
  r.message_ns.assign(static_cast<size_t>(tp) * r.num_tasks, 0);
  r.message_bytes.assign(r.num_tasks, 0);
  // W durations of a split recording, folded into their B where this run does not split.
  std::vector<std::int64_t> folded_w(static_cast<size_t>(tp) * r.num_tasks, -1);
  bool saw_w = false;
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  std::map<std::string, int> col;
  auto split = [](const std::string& s) {
    std::vector<std::string> out;
    std::string cur;
    for (char c : s) {
      if (c == ',') {
        out.push_back(cur);
        cur.clear();
      } else if (c != '\r' && c != ' ' && c != '\t') {
        cur += c;
      }
    }
    out.push_back(cur);
    return out;
  };
  // Rows first: with a `step` column, only the chosen step's rows count (default: the last).
  std::vector<std::pair<int, std::vector<std::string>>> rows;
  while (std::getline(in, line)) {
    ++line_no;
    const std::string where = origin + ":" + std::to_string(line_no);
    if (line.find_first_not_of(" \t\r") == std::string::npos || line[0] == '#') continue;
    auto cells = split(line);
    if (col.empty()) {
      static const std::set<std::string> known = {"step", "stage",       "chunk",   "microbatch",
                                                  "kind", "duration_us", "tp_rank", "send_us"};
      for (size_t i = 0; i < cells.size(); ++i) {
        if (!known.count(cells[i]))
          throw InputError(where + ": unknown column '" + cells[i].substr(0, 30) +
                           "' (the columns are [step,]stage,chunk,microbatch,kind,duration_us"
                           "[,tp_rank][,send_us])");
        if (!col.emplace(cells[i], static_cast<int>(i)).second)
          throw InputError(where + ": column '" + cells[i] + "' given twice");
      }
      for (const char* need : {"stage", "chunk", "microbatch", "kind", "duration_us"})
        if (!col.count(need))
          throw InputError(where + ": replay header lacks column '" + need +
                           "' (need [step,]stage,chunk,microbatch,kind,duration_us[,tp_rank]"
                           "[,send_us])");
      continue;
    }
    if (cells.size() != col.size())
      throw InputError(where + ": expected " + std::to_string(col.size()) + " columns, got " +
                       std::to_string(cells.size()));
    rows.emplace_back(line_no, std::move(cells));
  }
  const bool stepped = col.count("step") > 0;
  std::vector<std::string> step_of(rows.size());
  std::string chosen = step >= 0 ? std::to_string(step) : "";
  if (stepped) {
    long long last = -1;
    for (size_t i = 0; i < rows.size(); ++i) {
      step_of[i] = rows[i].second[col.at("step")];
      const std::string& st = step_of[i];
      if (st.empty() || st.size() > 9 || st.find_first_not_of("0123456789") != std::string::npos)
        throw InputError(origin + ":" + std::to_string(rows[i].first) + ": column step: '" +
                         st.substr(0, 30) + "' is not a whole number in [0, 999999999]");
      last = std::max(last, std::stoll(st));
    }
    if (chosen.empty()) chosen = std::to_string(last);
    if (std::find(step_of.begin(), step_of.end(), chosen) == step_of.end())
      throw InputError("`step`: " + origin + " has no step " + chosen + "; its last is " +
                       std::to_string(last));
  } else if (step >= 0) {
    throw InputError("`step`: " + origin + " holds one step (no `step` column)");
  }
  for (size_t row = 0; row < rows.size(); ++row) {
    if (stepped && step_of[row] != chosen) continue;
    const std::string where = origin + ":" + std::to_string(rows[row].first);
    const std::vector<std::string>& cells = rows[row].second;
    auto num = [&](const char* name, bool integer) {
      const std::string& s = cells[col.at(name)];
      double v = 0;
      size_t used = 0;
      try {
        // Decimal only: stod also reads hexadecimal ("0x10" as 16), inf and nan.
        if (s.find_first_not_of("0123456789.eE+-") == std::string::npos) v = std::stod(s, &used);
      } catch (...) {
        used = 0;
      }
      if (used == 0 || used != s.size() || !std::isfinite(v))
        throw InputError(where + ": column " + name + ": '" + s.substr(0, 30) +
                         "' is not a number");
      if (v < 0)
        throw InputError(where + ": column " + name + ": negative value " + s.substr(0, 30));
      if (integer && (v != std::floor(v) || v > 1e9))
        throw InputError(where + ": column " + name + ": '" + s.substr(0, 30) +
                         "' is not a whole number in [0, 1e9]");
      return v;
    };
    const std::string& k = cells[col.at("kind")];
    TaskId t;
    if (k == "F")
      t.kind = Kind::F;
    else if (k == "B")
      t.kind = Kind::B;
    else if (k == "W")
      t.kind = Kind::W;
    else
      throw InputError(where + ": column kind: '" + k.substr(0, 10) + "' is not F, B or W");
    const int stage = static_cast<int>(num("stage", true));
    t.chunk = static_cast<int>(num("chunk", true));
    t.mb = static_cast<int>(num("microbatch", true));
    // A recording with the split backward replayed without it: B then does W's work too.
    const bool fold = t.kind == Kind::W && !m.split() && m.valid({Kind::B, t.chunk, t.mb});
    if (fold) t.kind = Kind::B;
    saw_w = saw_w || k == "W";
    if (!m.valid(t))
      throw InputError(where + ": task " + to_string(t) + " does not exist in this run");
    if (m.stage_of(t) != stage)
      throw InputError(where + ": task " + to_string(t) + " runs on stage " +
                       std::to_string(m.stage_of(t)) + ", not " + std::to_string(stage));
    const std::string at_dur = where + ": column duration_us";
    const auto dur = duration_ns(num("duration_us", false), at_dur.c_str());
    const std::string at_send = where + ": column send_us";
    const auto send =
        col.count("send_us") ? duration_ns(num("send_us", false), at_send.c_str()) : 0;
    int lo = 0, hi = tp;
    if (col.count("tp_rank")) {
      lo = static_cast<int>(num("tp_rank", true));
      if (lo >= tp)
        throw InputError(where + ": tp_rank " + std::to_string(lo) + " >= `tp` " +
                         std::to_string(tp));
      hi = lo + 1;
    }
    for (int rank = lo; rank < hi; ++rank) {
      const size_t at = static_cast<size_t>(rank) * r.num_tasks + m.index(t);
      std::int64_t& into = fold ? folded_w[at] : r.compute_ns[at];
      if (into >= 0)
        throw InputError(where + ": task " + to_string(fold ? TaskId{Kind::W, t.chunk, t.mb} : t) +
                         " appears twice" +
                         (tp > 1 ? " on tp rank " + std::to_string(rank) : std::string()));
      into = dur;
      if (!fold) r.message_ns[at] = send;
    }
  }
  if (col.empty()) throw InputError(origin + ": empty replay file (no header)");
  for (int rank = 0; rank < tp; ++rank)
    for (int i = 0; i < r.num_tasks; ++i) {
      const size_t at = static_cast<size_t>(rank) * r.num_tasks + i;
      if (r.compute_ns[at] < 0)
        throw InputError(
            origin + ": no duration for task " + to_string(m.task(i)) +
            (tp > 1 ? " on tp rank " + std::to_string(rank) : std::string()) +
            (m.task(i).kind == Kind::W && !saw_w
                 ? " (the replay has no W tasks: it was recorded without the split backward; "
                   "replay it with `split_backward` off)"
                 : std::string()));
      if (folded_w[at] >= 0) r.compute_ns[at] += folded_w[at];
    }
  check_total(r);
  return r;
}

std::string replay_csv(const WorkModel& m, const std::vector<std::pair<int, RealizedWork>>& steps) {
  if (steps.empty()) return "";
  const bool stepped = steps.size() > 1 || steps.front().first >= 0;
  const int tp = steps.front().second.tp;
  std::string out = std::string(stepped ? "step," : "") +
                    "stage,chunk,microbatch,kind,duration_us," + (tp > 1 ? "tp_rank," : "") +
                    "send_us\n";
  for (const auto& [step, w] : steps)
    for (int rank = 0; rank < w.tp; ++rank)
      for (int i = 0; i < w.num_tasks; ++i) {
        const TaskId t = m.task(i);
        out += (stepped ? std::to_string(step) + "," : std::string()) +
               std::to_string(m.stage_of(t)) + "," + std::to_string(t.chunk) + "," +
               std::to_string(t.mb) + "," + kind_char(t.kind) + "," +
               fmt("%.3f", static_cast<double>(w.compute(rank, i)) / 1e3) + "," +
               (w.tp > 1 ? std::to_string(rank) + "," : "") +
               fmt("%.3f", static_cast<double>(w.message(rank, i)) / 1e3) + "\n";
      }
  return out;
}

RealizedWork read_replay_file(const std::string& path, const WorkModel& m, int tp,
                              const TraceOptions& trace) {
  if (is_trace_path(path)) return import_trace(path, m, tp, trace).work;
  return parse_replay_csv(read_input_file(path, kReplayFile), m, tp, path, trace.step);
}

}  // namespace rrfp

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "core/error.hpp"
#include "core/json_input.hpp"
#include "core/output_file.hpp"
#include "core/printable.hpp"
#include "report/columns.hpp"
#include "report/report.hpp"

namespace rrfp {

using columns::lpad;
using columns::ms;
using columns::pad;

std::string ms_text(std::int64_t ns, std::int64_t step_ns) {
  return fmt(step_ns > 0 && step_ns < 1000000 ? "%.6f" : "%.2f", ms(ns));
}

void write_text_file(const std::string& path, const std::string& text, const char* flag) {
  // Whole or not at all: a failed write once left a cut file in place of the old one.
  replace_file(path, text, std::string(flag) + ": '" + path + "'");
}

void write_json_report(const std::string& path, const nlohmann::json& j) {
  const std::string text = json_text(j, 2) + "\n";
  if (path == "-")
    std::cout << text;
  else
    write_text_file(path, text, "--json");
}

std::string peak_d_column(const std::vector<int>& peaks) {
  std::string out;
  if (peaks.size() <= kPeaksListed) {
    for (int d : peaks)
      out += (out.empty() ? "" : " ") + std::to_string(d);
    return out;
  }
  // The first stage of each: minmax_element would name the last largest.
  const auto hi = std::max_element(peaks.begin(), peaks.end());
  const auto lo = std::min_element(peaks.begin(), peaks.end());
  return "max " + std::to_string(*hi) + " (stage " + std::to_string(hi - peaks.begin()) +
         "), min " + std::to_string(*lo) + " (stage " + std::to_string(lo - peaks.begin()) +
         ") of " + std::to_string(peaks.size()) + " stages";
}

namespace {

// Every run follows a fixed list, whose TP ranks run no coordination protocol.
bool fixed_lists_only(const std::vector<ReportRun>& runs) {
  return std::all_of(runs.begin(), runs.end(),
                     [](const ReportRun& r) { return r.policy == "fixed"; });
}

}  // namespace

std::string format_table(const ReportHeader& h, const std::vector<ReportRun>& runs,
                         bool per_stage) {
  std::string out;
  if (runs.empty()) return out;
  const auto& c = runs[0].cfg;
  // A fixed list's ranks each follow it (semantics.md §4): a table of fixed runs alone named a
  // protocol none of them ran.
  const std::string coordination =
      fixed_lists_only(runs) ? "fixed lists: no coordination" : h.tp_protocol;
  out += "P=" + std::to_string(c.pp) + " V=" + std::to_string(c.vpp) + " (" +
         to_string(c.placement) + ") M=" + std::to_string(c.microbatches) +
         (c.ordered_forwards ? " (ordered forwards)" : "") + " TP=" + std::to_string(h.tp) +
         (h.tp > 1 ? " (" + coordination + ")" : "") + "  workload=" + visible(h.workload) +
         (h.seed ? "  seed=" + std::to_string(*h.seed) : "") + "  [" + h.source + "]\n\n";
  // A label may name a hint file, whose name may hold any byte: one visible row each.
  const auto shown = [](const ReportRun& r) { return printable(r.label, r.label.size()); };
  size_t lw = 5;
  for (const auto& r : runs)
    lw = std::max(lw, shown(r).size());
  out += pad("run", lw) +
         "  makespan_ms  speedup  bubble  efficiency  lower_bound_ms  limit  peak_D/stage\n";
  const double base = static_cast<double>(runs[0].metrics.makespan);
  for (const auto& r : runs) {
    const auto& m = r.metrics;
    std::vector<int> stage_peaks;
    for (const auto& s : m.stages)
      stage_peaks.push_back(s.peak_d);
    const std::string peaks = peak_d_column(stage_peaks);
    out += pad(shown(r), lw) + "  " + lpad(ms_text(m.makespan, m.makespan), 11) + "  " +
           // A step of no time (tasks of 0 us) is no faster or slower than another.
           lpad(m.makespan > 0 && base > 0 ? fmt("%.3fx", base / static_cast<double>(m.makespan))
                                           : "-",
                7) +
           "  " + lpad(fmt("%.1f%%", 100 * m.bubble_ratio), 6) + "  " +
           lpad(fmt("%.3f", m.efficiency), 10) + "  " +
           lpad(ms_text(m.bound.value, m.makespan), 14) + "  " +
           lpad(r.policy == "ready" ? std::to_string(m.limit) : "-", 5) + "  " + peaks + "\n";
  }
  if (per_stage) {
    for (const auto& r : runs) {
      const std::int64_t span = r.metrics.makespan;
      out +=
          "\n" + shown(r) + " per stage:\n  stage  busy_ms  blocked_ms  idle_ms  peak_D  peak_W\n";
      for (size_t s = 0; s < r.metrics.stages.size(); ++s) {
        const auto& st = r.metrics.stages[s];
        out += "  " + lpad(std::to_string(s), 5) + "  " + lpad(ms_text(st.busy, span), 7) + "  " +
               lpad(ms_text(st.blocked, span), 10) + "  " + lpad(ms_text(st.idle, span), 7) + "  " +
               lpad(std::to_string(st.peak_d), 6) + "  " +
               lpad(std::to_string(st.peak_pending_w), 6) + "\n";
      }
      if (r.metrics.coordination_rounds > 0)
        out += "  tp coordination: " + std::to_string(r.metrics.coordination_rounds) + " rounds, " +
               std::to_string(r.metrics.failed_rounds) + " disagreed, " +
               ms_text(r.metrics.coordination_per_rank, span) + " ms blocked per rank\n";
    }
  }
  out +=
      "\nlower bound: max over stages of lead-in + work + tail, and the critical path "
      "(efficiency = bound / makespan).\n";
  return out;
}

nlohmann::json to_json(const ReportHeader& h, const std::vector<ReportRun>& runs) {
  nlohmann::json j;
  j["source"] = h.source;
  j["workload"] = h.workload;
  j["seed"] = h.seed ? nlohmann::json(*h.seed) : nlohmann::json(nullptr);
  j["tp"] = h.tp;
  // The protocol that coordinated the runs' TP ranks; none at TP 1, nor where every run follows
  // a fixed list (the table says "fixed lists: no coordination"): "leader" read as one that ran.
  j["tp_protocol"] =
      h.tp > 1 && !fixed_lists_only(runs) ? nlohmann::json(h.tp_protocol) : nlohmann::json(nullptr);
  j["runs"] = nlohmann::json::array();
  const double base = runs.empty() ? 1 : static_cast<double>(runs[0].metrics.makespan);
  for (const auto& r : runs) {
    const auto& m = r.metrics;
    nlohmann::json jr;
    jr["label"] = r.label;
    jr["hint"] = r.hint;
    jr["policy"] = r.policy;
    jr["comm"] = r.comm;
    jr["pp"] = r.cfg.pp;
    jr["vpp"] = r.cfg.vpp;
    jr["placement"] = to_string(r.cfg.placement);
    jr["microbatches"] = r.cfg.microbatches;
    jr["split_backward"] = r.cfg.split_backward;
    if (r.cfg.ordered_forwards) jr["ordered_forwards"] = true;  // absent: the default, off
    jr["makespan_ms"] = ms(m.makespan);
    // null where the table shows "-": no speedup against or of a step of no time (the first of
    // none read 0.0, as if it were infinitely slower).
    if (m.makespan > 0 && base > 0)
      jr["speedup_vs_first"] = base / static_cast<double>(m.makespan);
    else
      jr["speedup_vs_first"] = nullptr;
    jr["bubble_ratio"] = m.bubble_ratio;
    jr["lower_bound_ms"] = ms(m.bound.value);
    jr["lower_bound_stage_ms"] = ms(m.bound.stage_bound);
    jr["lower_bound_critical_path_ms"] = ms(m.bound.critical_path);
    if (m.bound.memory > 0) jr["lower_bound_memory_ms"] = ms(m.bound.memory);
    jr["efficiency"] = m.efficiency;
    // The ready policy's bounds; the fixed policy follows its order and enforces neither (null,
    // as the table's "-": a number here read as a bound the run kept). Nor is there a W to cap
    // where the backward is not split.
    const bool ready = r.policy == "ready";
    jr["limit"] = ready ? nlohmann::json(m.limit) : nlohmann::json(nullptr);
    jr["max_pending_w"] =
        ready && r.cfg.split_backward ? nlohmann::json(m.max_pending_w) : nlohmann::json(nullptr);
    jr["coordination_rounds"] = m.coordination_rounds;
    jr["failed_coordination_rounds"] = m.failed_rounds;
    jr["coordination_ms_per_rank"] = static_cast<double>(m.coordination_per_rank) / 1e6;
    jr["collective_wait_ms_per_rank"] = static_cast<double>(m.collective_per_rank) / 1e6;
    if (!r.dispatch_gaps.empty())  // what `rrfp run` prints, for each run
      jr["dispatch_gap_us"] = {
          {"median", median(r.dispatch_gaps) / 1e3},
          {"p99", static_cast<double>(percentile(r.dispatch_gaps, 0.99)) / 1e3},
          {"dispatches", r.dispatch_gaps.size()}};
    jr["stages"] = nlohmann::json::array();
    for (const auto& s : m.stages)
      jr["stages"].push_back({{"busy_ms", ms(s.busy)},
                              {"blocked_ms", ms(s.blocked)},
                              {"idle_ms", ms(s.idle)},
                              {"peak_d", s.peak_d},
                              {"peak_pending_w", s.peak_pending_w}});
    j["runs"].push_back(jr);
  }
  return j;
}

}  // namespace rrfp
